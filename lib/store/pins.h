/* The store's cache of pinned buffers (pins.c): the staging buffers of CUDA restores, kept for
 * the handle's life, because freeing pinned memory synchronizes the device, which would stall a
 * trainer running beside a restore. Internal to lib/. */
#ifndef CKPT_PINS_H
#define CKPT_PINS_H

#include <pthread.h>
#include <stddef.h>

struct ckpt_store;

#define STORE_PINNED_MAX 32

struct store_pins {
	pthread_mutex_t mu;
	struct store_pinned {
		void *p;
		size_t size;
	} buf[STORE_PINNED_MAX];
	unsigned n;
	void (*free_fn)(void *p, size_t size); /* the last given's: frees what is kept at fini */
};

void store_pins_init(struct store_pins *c);
/* Frees every buffer kept (with the free_fn given). */
void store_pins_fini(struct store_pins *c);

/* The store's cache of pinned buffers (the read layer's CUDA staging): take returns a cached
 * buffer of at least size bytes into *p (its size into *got) and 1, or 0 when there is none;
 * give keeps p (size bytes) for a later take, or frees it with free_fn when the cache is full.
 * store_fini frees what is kept with the free_fn given. Thread-safe. */
int store_pinned_take(struct ckpt_store *s, size_t size, void **p, size_t *got);
void store_pinned_give(struct ckpt_store *s, void *p, size_t size,
		       void (*free_fn)(void *p, size_t size));

#endif
