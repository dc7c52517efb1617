/* Internal to lib/api: the checks every public entry point makes on the structs a caller fills
 * (struct_size), shared by the save, reader, retention and remote front ends. */
#ifndef CKPT_API_INT_H
#define CKPT_API_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* The public reader (reader_api.c opens it, read_api.c reads through it). */
struct ckpt_reader {
	ckpt_store *s;
	uint64_t step;
	dreader *d;     /* NULL when opened CKPT_READ_AS_SAVED */
	reader1 *r;     /* d's own, or ours */
	bool as_saved;
	bool identity;  /* global tensor i is tensor i as saved, whole */
};

/* 0 when a caller's struct of struct_size bytes is one this library knows (sizeof at 1.0: the
 * smallest; larger ones come from newer headers and their extra fields are ignored), else
 * -CKPT_E_INVAL with a message naming what. */
int api_size_ok(size_t struct_size, size_t known, const char *what);

/* Copies the library's full struct src (n bytes, its first member struct_size) into the caller's
 * dst, whose struct_size says how much of it the caller has room for, and keeps that size. */
void api_copy_out(void *dst, const void *src, size_t n);

#endif
