// placeholder: the CUDA C source of lud is written with the CUDA backend
