/* In-flight markers (marker.c): which saves are running, for gc and prune, seen through the
 * shared file system whatever its locks do; and what they share with reader leases (lease.c):
 * files of a store directory that a live process share-locks and keeps fresh. */
#ifndef CKPT_MARKER_H
#define CKPT_MARKER_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

/* Default of CKPT_OPT_GC_GRACE_S, and how often a live save refreshes its marker. */
#define MARKER_GRACE_DEFAULT_S (6 * 3600)
#define MARKER_REFRESH_S 60

/* A file a live process keeps fresh: the process's refresh thread touches fd (its mtime)
 * every MARKER_REFRESH_S while the entry is registered. */
struct marker_fresh {
	int fd;
	struct marker_fresh *next; /* the registered list (marker.c) */
};

/* Registers f (f->fd set), starting the refresh thread with the first. */
void marker_fresh_add(struct marker_fresh *f);

/* Unregisters f; after it returns the thread no longer uses f->fd. */
void marker_fresh_del(struct marker_fresh *f);

/* STORE/name, created when create; never through a symbolic link (-ELOOP). Returns the fd or
 * -errno. */
int marker_dir_open(struct ckpt_store *s, const char *name, bool create);

/* A fresh name "<16 random hex digits><suffix>" into buf of len bytes. */
void marker_random_name(char *buf, size_t len, const char *suffix);

/* Writes text as the whole content of dirfd/name through a descriptor of its own that is
 * closed at once: NFS writes a file's data back at each close, so another node reads it whole
 * (close-to-open). Never grows an empty window: the text is written, then the file cut to it.
 * Returns 0 or -errno. */
int marker_write_file(int dirfd, const char *name, const char *text, size_t len);

/* Whether a directory entry is a state file NAME<suffix> or a temporary one (".NAME...tmp",
 * *tmp then true). */
bool marker_file_name(const char *name, const char *suffix, bool *tmp);

/* Whether the file open at fd was last refreshed grace_s or more seconds ago (false when it
 * cannot be told). */
bool marker_aged(int fd, int64_t grace_s);

/* Creates s's marker STORE/writers/<random>.writer (its writer record, share-locked, refreshed
 * every MARKER_REFRESH_S by a thread) unless s has one, which is refreshed instead. Call under
 * the writer lock, before the save reads the manifests. Returns 0 or -CKPT_E_*. */
int marker_begin(struct ckpt_store *s, const char *what);

/* Removes s's marker (none: nothing). */
void marker_end(struct ckpt_store *s);

/* The live markers gc saw. */
struct marker_set {
	unsigned live, dead;
	char who[256]; /* the first live one: "host H pid P (W since T)" */
};

/* Reads every marker of the store. A marker of this node (its record names our boot id) is live
 * while its flock is held; any other (another node's, or no complete record yet) while it was
 * refreshed less than grace_s seconds ago. When remove, dead ones are removed. Returns 0 or
 * -CKPT_E_IO (the directory cannot be read: gc then removes nothing). */
int marker_scan(struct ckpt_store *s, int64_t grace_s, bool remove, struct marker_set *ms);

#endif
