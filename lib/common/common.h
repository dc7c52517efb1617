/* Internal helpers shared by every module: error reporting, little-endian coding, alignment,
 * time. Nothing here does I/O. */
#ifndef CKPT_COMMON_H
#define CKPT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

#define CKPT_ALIGN 4096u
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Records a detailed message for ckpt_errmsg() and returns -err (err is a positive CKPT_E_*),
 * so that a failing path reads: return ckpt_fail(CKPT_E_IO, "write %s: %s", path, strerror(e)); */
int ckpt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with more context ("opening checkpoint 7: <old message>"). */
void ckpt_fail_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Maps an errno value to the closest CKPT_E_* code (positive). */
int ckpt_errno_code(int e);

/* Monotonic and wall clocks. */
double ckpt_now(void);
int64_t ckpt_wall_ns(void);
/* 64 random bits from the kernel (never 0: 0 means "none" where it is stored); the clock mixed
 * when the kernel has none to give yet. */
uint64_t ckpt_random64(void);

/* Allocation of 4 KiB-aligned buffers for O_DIRECT; NULL when out of memory. */
/* Grows the array *p of *cap elements of elem bytes (doubling, from 16) to hold at least need.
 * Returns 0, or -CKPT_E_NOMEM with *p unchanged. */
int ckpt_grow(void **p, size_t *cap, size_t need, size_t elem);
void *ckpt_aligned_alloc(size_t size);

static inline void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | ((uint64_t)get_le32(p + 4) << 32);
}

#endif
