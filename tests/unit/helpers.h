/* Helpers for the unit tests: checks that report file and line, temporary stores, data. */
#ifndef CKPT_TEST_HELPERS_H
#define CKPT_TEST_HELPERS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

extern int t_failures;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
			t_failures++;                                                            \
		}                                                                                \
	} while (0)
#define CHECK_RC(expr, want)                                                                     \
	do {                                                                                     \
		int rc_ = (int)(expr);                                                           \
		if (rc_ != (want)) {                                                             \
			fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d; message: %s\n",   \
				__FILE__, __LINE__, #expr, rc_, ckpt_strerror(rc_), (want),      \
				ckpt_errmsg());                                                  \
			t_failures++;                                                            \
		}                                                                                \
	} while (0)
#define CHECK_OK(expr) CHECK_RC(expr, 0)
#define REQUIRE(cond)                                                                            \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s (%s)\n", __FILE__, __LINE__,   \
				#cond, ckpt_errmsg());                                           \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

/* Exit status of a test: 0 when no check failed. */
int t_done(void);

/* A fresh temporary directory (removed by t_rmrf); returns a malloc'd path. */
char *t_tmpdir(const char *tag);
void t_rmrf(const char *path);

/* Opens (creating) a store with chunk size cs (0: default) and compression. */
ckpt_store *t_open_store(const char *path, uint32_t cs, int compress);

/* Deterministic pseudo-random bytes. */
void t_fill(void *buf, size_t n, uint64_t seed);
uint64_t t_rand(uint64_t *state);

/* Sum of the sizes of the regular files under dir. */
uint64_t t_dir_bytes(const char *dir);
/* Flips one bit of the byte at offset in file. */
void t_flip_byte(const char *file, uint64_t offset);
/* Returns the path (malloc'd) of the first file in dir whose name ends with suffix, or NULL. */
char *t_first_file(const char *dir, const char *suffix);

#endif
