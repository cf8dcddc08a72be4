// placeholder: the CUDA C source of gaussian is written with the CUDA backend
