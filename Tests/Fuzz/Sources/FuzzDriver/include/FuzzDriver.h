#ifndef SHOAL_FUZZ_DRIVER_H
#define SHOAL_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver, for a program that has its own main: SwiftPM names an
/// executable's entry point TARGET_main and aliases main to it, so the fuzz targets
/// call this from there instead of using libFuzzer's main.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
