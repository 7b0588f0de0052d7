#ifndef CSHOALFILE_H
#define CSHOALFILE_H

#include <stdint.h>

/// Reads the birth time of the file at `path` (Linux `statx` with `STATX_BTIME`, or
/// `st_birthtimespec` on Darwin). Returns 0 and sets `seconds` and `nanoseconds`
/// when the file system keeps it, -1 otherwise (no such file, no birth time kept,
/// or a kernel without `statx`).
int shoal_file_birth_time(const char *path, int64_t *seconds, uint32_t *nanoseconds);

#endif
