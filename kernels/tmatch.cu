// placeholder: the CUDA C source of tmatch is written with the CUDA backend
