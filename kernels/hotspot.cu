// placeholder: the CUDA C source of hotspot is written with the CUDA backend
