/* The store's cache of pinned staging buffers (pins.h). */
#include "store/store.h"

#include <stdbool.h>

void store_pins_init(struct store_pins *c)
{
	pthread_mutex_init(&c->mu, NULL);
}

void store_pins_fini(struct store_pins *c)
{
	for (unsigned i = 0; i < c->n; i++)
		c->free_fn(c->buf[i].p, c->buf[i].size);
	c->n = 0;
	pthread_mutex_destroy(&c->mu);
}

int store_pinned_take(struct ckpt_store *s, size_t size, void **p, size_t *got)
{
	int found = 0;
	pthread_mutex_lock(&s->pins.mu);
	for (unsigned i = 0; i < s->pins.n && !found; i++) {
		if (s->pins.buf[i].size < size)
			continue;
		*p = s->pins.buf[i].p;
		*got = s->pins.buf[i].size;
		s->pins.buf[i] = s->pins.buf[--s->pins.n];
		found = 1;
	}
	pthread_mutex_unlock(&s->pins.mu);
	return found;
}

void store_pinned_give(struct ckpt_store *s, void *p, size_t size,
		       void (*free_fn)(void *p, size_t size))
{
	pthread_mutex_lock(&s->pins.mu);
	bool kept = s->pins.n < STORE_PINNED_MAX;
	if (kept) {
		s->pins.buf[s->pins.n++] = (struct store_pinned){p, size};
		s->pins.free_fn = free_fn;
	}
	pthread_mutex_unlock(&s->pins.mu);
	if (!kept)
		free_fn(p, size);
}
