// placeholder: the CUDA C source of backprop is written with the CUDA backend
