// Needleman-Wunsch global alignment of a batch of sequence pairs, tiled along anti-diagonals
// (after Rodinia's needle). Each pair's score matrix is (n+1) x (n+1), row 0 and column 0 hold
// the gap penalties; the pairs' matrices lie one after another. One launch computes every 16x16
// tile of one anti-diagonal of tiles of every pair (blockIdx.y is the pair); inside a tile,
// threads sweep the 31 cell anti-diagonals in shared memory. Timed step: the longest diagonal.
// Batching short alignments (as read aligners do) gives a launch enough blocks to fill a GPU;
// one long alignment has one tile diagonal of at most n/16 blocks.
#define NW_TILE 16

extern "C" __global__ void needle_tile_diagonal(int* score, const int* ref, int n, int penalty,
                                                int diagonal)
{
    __shared__ int s[NW_TILE + 1][NW_TILE + 1];
    __shared__ int r[NW_TILE][NW_TILE];
    const size_t pair = (size_t)blockIdx.y * (size_t)(n + 1) * (size_t)(n + 1);
    score += pair;
    ref += pair;
    const int tiles = n / NW_TILE;
    const int first = diagonal < tiles ? 0 : diagonal - tiles + 1;
    const int tile_x = first + blockIdx.x;
    const int tile_y = diagonal - tile_x;
    const int w = n + 1;
    const int tx = threadIdx.x;
    const int row0 = tile_y * NW_TILE;
    const int col0 = tile_x * NW_TILE;

    if (tx == 0) {
        s[0][0] = score[row0 * w + col0];
    }
    s[0][tx + 1] = score[row0 * w + col0 + tx + 1];
    s[tx + 1][0] = score[(row0 + tx + 1) * w + col0];
    for (int i = 0; i < NW_TILE; ++i) {
        r[i][tx] = ref[(row0 + i + 1) * w + col0 + tx + 1];
    }
    __syncthreads();

    for (int m = 0; m < 2 * NW_TILE - 1; ++m) {
        const int i = m - tx;
        if (i >= 0 && i < NW_TILE) {
            const int diag = s[i][tx] + r[i][tx];
            const int up = s[i][tx + 1] - penalty;
            const int left = s[i + 1][tx] - penalty;
            s[i + 1][tx + 1] = max(diag, max(up, left));
        }
        __syncthreads();
    }

    for (int i = 0; i < NW_TILE; ++i) {
        score[(row0 + i + 1) * w + col0 + tx + 1] = s[i + 1][tx + 1];
    }
}
