/* The listeners of a store handle (hooks.h): its events go to them, and readers ask them for
 * what is not local. */
#include "store/store.h"

#include "common/common.h"

void store_hooks_fini(struct store_hooks *h)
{
	/* Each close may free its listener: the next one is read before. */
	for (struct store_listener *l = h->list, *next; l; l = next) {
		next = l->next;
		if (l->ops->close)
			l->ops->close(l->ctx);
	}
	h->list = NULL;
	__atomic_store_n(&h->upkey, 0, __ATOMIC_RELEASE);
}

/* The upload key of the listeners but skip (the first that has one), 0 when none. */
static uint64_t upkey_of(const struct store_hooks *h, const struct store_listener *skip)
{
	for (const struct store_listener *l = h->list; l; l = l->next)
		if (l != skip && l->upkey)
			return l->upkey;
	return 0;
}

void store_listen(struct ckpt_store *s, struct store_listener *l)
{
	struct store_listener **pp = &s->hooks.list;
	while (*pp)
		pp = &(*pp)->next;
	l->next = NULL;
	*pp = l;
	__atomic_store_n(&s->hooks.upkey, upkey_of(&s->hooks, NULL), __ATOMIC_RELEASE);
}

void store_unlisten(struct ckpt_store *s, struct store_listener *l)
{
	struct store_listener **pp = &s->hooks.list;
	while (*pp && *pp != l)
		pp = &(*pp)->next;
	if (!l || !*pp)
		return;
	/* The close comes first, the listener still registered (it stops what may use it), and
	 * may free l: what the unlinking needs is read before. */
	struct store_listener *next = l->next;
	uint64_t key = upkey_of(&s->hooks, l);
	if (l->ops->close)
		l->ops->close(l->ctx);
	*pp = next;
	__atomic_store_n(&s->hooks.upkey, key, __ATOMIC_RELEASE);
}

void *store_listener_ctx(const struct ckpt_store *s, const struct store_listener_ops *ops)
{
	for (const struct store_listener *l = s->hooks.list; l; l = l->next)
		if (l->ops == ops)
			return l->ctx;
	return NULL;
}

void store_notify_commit(struct ckpt_store *s, uint64_t step)
{
	for (struct store_listener *l = s->hooks.list; l; l = l->next)
		if (l->ops->commit)
			l->ops->commit(l->ctx, step);
}

void store_notify_dist(struct ckpt_store *s, uint64_t step, int rank, unsigned world,
		       const bool *sharing)
{
	for (struct store_listener *l = s->hooks.list; l; l = l->next)
		if (l->ops->commit_dist)
			l->ops->commit_dist(l->ctx, step, rank, world, sharing);
}

uint64_t store_upload_key(const struct ckpt_store *s)
{
	return __atomic_load_n(&s->hooks.upkey, __ATOMIC_ACQUIRE);
}

/* The listener readers fetch from: the first that fetches manifests and packs. */
static struct store_listener *source(const struct ckpt_store *s)
{
	for (struct store_listener *l = s->hooks.list; l; l = l->next)
		if (l->ops->manifest && l->ops->pack)
			return l;
	return NULL;
}

bool store_remote_reads(const struct ckpt_store *s)
{
	return source(s) != NULL;
}

bool store_remote_first(const struct ckpt_store *s)
{
	const struct store_listener *l = source(s);
	return l && l->read_first;
}

int store_remote_manifest(struct ckpt_store *s, uint64_t step, struct manifest *m)
{
	struct store_listener *l = source(s);
	return l ? l->ops->manifest(l->ctx, step, m) : -CKPT_E_NOTFOUND;
}

int store_remote_pack(struct ckpt_store *s, const struct manifest *m, uint32_t id, char *what,
		      size_t len)
{
	struct store_listener *l = source(s);
	return l ? l->ops->pack(l->ctx, m, id, what, len) : -CKPT_E_NOTFOUND;
}
