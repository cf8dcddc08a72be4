// Breadth-first search, level-synchronous over a CSR graph (after Rodinia's bfs). Expand visits
// the neighbours of every frontier node and marks the unvisited ones; advance turns the marks
// into the next frontier. Expand never clears the frontier, so it can be repeated on the same
// level with the same effect. Timed step: expand on the level with the largest frontier.
extern "C" __global__ void bfs_expand(const int* offsets, const int* edges, const int* frontier,
                                      const int* visited, int* cost, int* updating, int nodes)
{
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= nodes || !frontier[v]) {
        return;
    }
    const int next = cost[v] + 1;
    for (int e = offsets[v]; e < offsets[v + 1]; ++e) {
        const int w = edges[e];
        if (!visited[w]) {
            cost[w] = next;
            updating[w] = 1;
        }
    }
}

extern "C" __global__ void bfs_advance(int* frontier, int* visited, int* updating, int nodes)
{
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= nodes) {
        return;
    }
    const int u = updating[v];
    frontier[v] = u;
    if (u) {
        visited[v] = 1;
        updating[v] = 0;
    }
}
