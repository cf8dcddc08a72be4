// placeholder: the CUDA C source of srad is written with the CUDA backend
