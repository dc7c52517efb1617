/* The writer lock of a store handle (lock.c): flock on STORE/LOCK, who uses it in this handle,
 * the multi-rank part mode it is shared in, the in-flight marker of the handle's save (marker.c)
 * and the writer record both hold (record.c). Internal to lib/. */
#ifndef CKPT_LOCK_H
#define CKPT_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_store;
struct marker;

struct store_lock {
	pthread_mutex_t mu;        /* users, gen, part_mode, part_rank */
	unsigned users;            /* the handle's saves, pulls and gc holding the lock */
	uint32_t gen;              /* the generation of the handle's last save (save.c) */
	/* Multi-rank saves (dist.c): this handle writes rank part_rank's part of a checkpoint:
	 * shared lock, packs in the rank's id range, manifest into parts/. */
	bool part_mode;
	uint32_t part_rank;
	int fd;                    /* STORE/LOCK while held, else -1 */
	/* The in-flight marker of this handle's save (marker.c), NULL when none; and the node
	 * identity markers are compared by (boot id; filled at first use, set by tests). */
	struct marker *marker;
	char node[40];
	/* Why the store's mount may not keep the writer lock across nodes (store_mount_check),
	 * or NULL: ckpt_store_warning(). */
	char *warning;
};

void store_lock_init(struct store_lock *l);
/* Frees what the lock keeps; the lock itself and the marker are released first (store_unlock,
 * marker_end). */
void store_lock_fini(struct store_lock *l);

/* Takes the writer lock (flock on STORE/LOCK: shared in part_mode, else exclusive), waiting up to
 * the option lock_wait_ms for it, and records this writer in the file (pid, host, what: a static
 * label such as "save", the rank in part_mode, since when) for the busy message of the next one
 * (lock.c). Returns 0, -CKPT_E_BUSY naming the holder (from the record when it is current),
 * -CKPT_E_PERM (read-only handle, symlinked lock file) or -CKPT_E_IO. unlock releases it (and
 * the record of an exclusive holder). */
int store_lock(struct ckpt_store *s, const char *what);
void store_unlock(struct ckpt_store *s);
/* store_lock for prune, delete and gc: the same lock, exclusive, but no in-flight marker (they
 * are what markers guard against). */
int store_lock_maint(struct ckpt_store *s, const char *what);

/* The writer record (lock.c) that STORE/LOCK and the in-flight markers hold, one "key value"
 * line each: pid, host, what (a label, "multi-rank save, rank N," in part_mode), since (UTC),
 * node (the boot id: which machine; last, so that older readers' prefix stays the same). */
struct writer_rec {
	long pid;
	char host[96];
	char node[40];
	char what[64];
	char since[32];
};
/* Writes s's record for what into buf (NUL-terminated). Returns its length (0 if it does not
 * fit). */
int store_format_record(struct ckpt_store *s, const char *what, char *buf, size_t len);
/* Parses a record (buf is changed); false when it is not a complete one. */
bool store_parse_record(char *buf, struct writer_rec *r);
/* s->lock.node, read on first use: /proc/sys/kernel/random/boot_id (processes of one kernel share
 * their flocks), else the host name. */
const char *store_node(struct ckpt_store *s);
/* This machine's host name as one printable word (record.c), into buf of len bytes. */
void store_host(char *buf, size_t len);

/* Whether the mount that holds dir, as the mountinfo file at path (/proc/self/mountinfo) lists
 * it, keeps flocks local to the node (NFS local_lock=flock|all or nolock, Lustre localflock).
 * Returns a malloc'd message saying so, or NULL (not local, not found, unreadable). */
char *store_mount_check(const char *mountinfo, const char *dir);

#endif
