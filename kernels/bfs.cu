// placeholder: the CUDA C source of bfs is written with the CUDA backend
