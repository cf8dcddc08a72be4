/* Fault injection for tests/crash_safety.rs, loaded into wcetd with LD_PRELOAD: while the file
 * named by WCETD_TEST_FAULT_FLAG exists, the fsync of a directory that follows (on the same
 * thread) a rename onto a calibration file (calibration-*.json) fails with EIO. That is the
 * one failure the store reports as NotSynced: the new file is in place, its directory entry
 * not yet durable. Every other call goes to libc unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static __thread int armed;

static int flagged(void) {
    const char *flag = getenv("WCETD_TEST_FAULT_FLAG");
    return flag != NULL && access(flag, F_OK) == 0;
}

static int is_calibration_file(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t n = strlen(name);
    return strncmp(name, "calibration-", 12) == 0 && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (real == NULL)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    armed = r == 0 && is_calibration_file(to) && flagged();
    return r;
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    struct stat st;
    if (armed && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        armed = 0;
        errno = EIO;
        return -1;
    }
    return real(fd);
}
