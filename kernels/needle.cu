// placeholder: the CUDA C source of needle is written with the CUDA backend
