// Swift's Glibc module leaves out statx(2), which glibc declares only under _GNU_SOURCE.
#define _GNU_SOURCE
#include "CShoalFile.h"

#include <fcntl.h>
#include <sys/stat.h>

int shoal_file_birth_time(const char *path, int64_t *seconds, uint32_t *nanoseconds) {
#if defined(__linux__) && defined(STATX_BTIME)
    struct statx info;
    if (statx(AT_FDCWD, path, 0, STATX_BTIME, &info) != 0) return -1;
    if ((info.stx_mask & STATX_BTIME) == 0) return -1;
    *seconds = info.stx_btime.tv_sec;
    *nanoseconds = info.stx_btime.tv_nsec;
    return 0;
#elif defined(__APPLE__)
    struct stat info;
    if (stat(path, &info) != 0) return -1;
    *seconds = info.st_birthtimespec.tv_sec;
    *nanoseconds = (uint32_t)info.st_birthtimespec.tv_nsec;
    return 0;
#else
    (void)path; (void)seconds; (void)nanoseconds;
    return -1;
#endif
}
