/* ckptctl: declarations shared by its commands. Every command reaches libckpt through ckpt.h
 * only. */
#ifndef CKPTCTL_H
#define CKPTCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "cli.h"

/* The commands, each declared with its options in its own file. */
extern const struct cli_cmd ck_cmd_import, ck_cmd_export, ck_cmd_list, ck_cmd_verify, ck_cmd_show,
	ck_cmd_diff, ck_cmd_du, ck_cmd_prune, ck_cmd_delete, ck_cmd_gc, ck_cmd_push, ck_cmd_pull;

/* remote.c: opens the remote of store at url, or $CKPT_REMOTE when url is NULL or empty (a usage
 * error when neither is given), with ckpt_remote_open's flags, into *rm (the store closes it).
 * Returns 0 or the exit status (reported). */
int ck_set_remote(const char *cmd, ckpt_store *store, const char *url, unsigned flags,
		  ckpt_remote **rm);
/* Why the remote manifest of info->step (an entry of ckpt_remote_list with info->error set) is
 * invalid: the library's message, which names its remote key, into buf. Reopens the remote *rm
 * (flags 0) to read it, and again after: *rm is the handle then (NULL when it no longer opens). */
const char *ck_remote_invalid_reason(ckpt_store *store, ckpt_remote **rm, const ckpt_info *info,
				     char *buf, size_t len);
/* prune --remote (pol: every rule of a local prune) or gc --remote (pol NULL) of STORE's objects
 * on url (or $CKPT_REMOTE),
 * flags CKPT_GC_DRY_RUN / CKPT_GC_FORCE, the grace age of upload markers from --grace when
 * grace_s >= 0; prints the report (text or JSON). Returns the exit status. */
int ck_remote_gc(const char *cmd, const char *path, const char *url,
		 const ckpt_retention *pol, int flags, bool json, int64_t grace_s);
/* rstores.c: prints the stores on url (ckpt_remote_stores: id, host, path, newest step,
 * checkpoints, bytes) on f, as a table or JSON. Returns the exit status (reported). */
int ck_remote_stores(const char *cmd, const char *url, bool json, FILE *f);
/* list without a store: with a remote (url, else $CKPT_REMOTE) and no STORE (path NULL) or a STORE
 * that holds no store, lists the remote's stores instead. Returns -1 to list STORE as usual, or
 * the exit status. */
int ck_list_stores_instead(const char *cmd, const char *path, const char *url, bool json);
/* push to a directory remote (url, else $CKPT_REMOTE) that does not exist: creates it (mkdir
 * -p). Returns 0 or EXIT_FAIL (reported). */
int ck_remote_mkdir(const char *cmd, const char *url);
/* The progress line of a push or pull (rstores.c); the library calls it from its transfer
 * threads, one at a time. The line starts at the first report, which knows the total. */
struct ck_xprog {
	struct progress bar;
	const char *label;
	bool enable, started;
};
int ck_xfer_progress(void *arg, uint64_t done, uint64_t total);

/* push --all: every valid local checkpoint the remote rm lacks, oldest first, with a progress
 * line each when progress; prints a line each and a summary (or JSON). Returns the exit status. */
int ck_push_all(const char *cmd, ckpt_store *store, ckpt_remote *rm, bool json, bool progress);
/* The --remote option of show and verify (their argument struct T has const char *remote). */
#define CK_REMOTE_READ_OPT(T) \
	{CLI_OPT(CLI_STRING, "remote", 'r', CLI_AT(T, remote), "URL", \
	 "read the checkpoint from the remote URL instead (its manifest and\n" \
	 "every record, range-read and checked): the remote's copy itself")}

/* The positional arguments of a command that works on a store: STORE first, then min-1 to
 * max-1 more (max < 0: no limit); step_next when a STEP may follow STORE (see ck_default_store).
 * missing[n] is the message for n (< min) arguments. */
struct ck_pos {
	int min, max;
	bool step_next;
	const char *missing[4];
};

/* Parses the options of cmd into args (cli_parse_opts), then the positional arguments by pos,
 * STORE taken from CKPT_STORE when it is left out: on return they are (*argv)[1..*argc), STORE
 * first. Reports a usage error. Returns -1 to go on, or the exit status to return. */
int ck_parse(const struct cli_cmd *cmd, void *args, int *argc, char ***argv,
	     const struct ck_pos *pos);
/* The positional arguments of a command that takes STORE alone. */
extern const struct ck_pos ck_pos_store;
/* ck_parse() by ck_pos_store, then opens the store (read-only when ro) into *store. Returns -1
 * when it is open, or the exit status to return (reported). */
int ck_parse_open(const struct cli_cmd *cmd, void *args, int *argc, char ***argv, bool ro,
		  ckpt_store **store);

/* Parses a STEP argument: a decimal number or "latest" (CKPT_STEP_LATEST). Returns 0, or prints a
 * usage error for cmd and returns EXIT_USAGE. */
int ck_parse_step(const char *cmd, const char *s, uint64_t *out);

/* CKPT_STORE: the store when a command's STORE argument is left out. Call after the options are
 * parsed, with the positional arguments in argv[at..argc): when CKPT_STORE is set and there are fewer
 * than min of them (STORE included), or the first looks like a STEP (a number or "latest") that
 * is no directory and the command takes a STEP after STORE (step_next), *argv becomes a copy with
 * CKPT_STORE inserted at at. Returns the new argc. */
int ck_default_store(int argc, char ***argv, int at, int min, bool step_next);

/* The exit status for a negative CKPT_E_* code: EXIT_NOTFOUND, EXIT_BUSY or EXIT_FAIL. */
int ck_exit_status(int err);

/* Reports the library's failure err on stderr as "ckptctl: CMD: <detail>", where the detail is
 * ckpt_errmsg() (which names the file), or "<what>: <ckpt_strerror(err)>" when the library left
 * no message. Returns the exit status for err. */
int ck_fail(const char *cmd, int err, const char *what);

/* Opens the store at path (read-only when ro; created when create). Reports failures as
 * ck_fail(); returns 0 or the exit status. */
int ck_open_store(const char *cmd, const char *path, bool ro, const ckpt_options *extra,
		  ckpt_store **out);

/* Message for an invalid-manifest checkpoint of step (from ckpt_store_list with
 * include_invalid): reopens it to get the library's detailed message. Writes into buf. */
const char *ck_invalid_reason(ckpt_store *store, const ckpt_info *info, char *buf, size_t len);

/* fmt.c: helpers of show, diff, du, prune and gc. */
/* Formats a shape as "[2,3]" ("[]" for a scalar). Returns buf. */
const char *ck_fmt_shape(unsigned ndim, const uint64_t *shape, char *buf, size_t len);
/* A tensor name for a table: as it is when plain, else quoted and escaped (st_quote). */
const char *ck_name(const char *name, char *buf, size_t len);
/* Opens the checkpoint of step for reading its tensors as saved (CKPT_READ_AS_SAVED: a
 * multi-rank checkpoint's pieces, each rank's, as show and diff list them); reports a failure as
 * ck_fail() and returns the exit status (4 for an unknown step), or 0. */
int ck_open_reader(const char *cmd, ckpt_store *store, uint64_t step, ckpt_reader **out);
/* Flushes standard output; reports a write error. Returns EXIT_OK or EXIT_FAIL. */
int ck_stdout_done(const char *cmd);
/* prune and gc: lists the store's damaged manifests on stderr (naming each and what is wrong).
 * Without force, refuses: returns EXIT_FAIL when there is one; with force, warns. Returns 0 to
 * go on, or an exit status. */
int ck_check_damaged(const char *cmd, ckpt_store *store, const char *path, bool force);
/* Prints the counters of a prune or gc report as JSON fields, or as text lines. */
void ck_report_json(struct jw *w, const ckpt_report *r);
void ck_report_text(const ckpt_report *r, bool dry);

/* gcopt.c: --max-unused and --compact-below of gc, prune --gc and delete, and their --grace. */
enum { CK_OPT_MAX_UNUSED = 200, CK_OPT_COMPACT_BELOW = 'c', CK_OPT_GRACE = 201 };
struct ck_gc_opts {
	ckpt_gc_policy pol;
	bool have_max_unused, have_compact_below;
	bool have_grace;
	int64_t grace_s;   /* --grace: CKPT_OPT_GC_GRACE_S of the store handle */
	struct progress bar; /* of the compaction, started on its first report */
	bool progress, bar_started;
};
/* Words the completion offers for --max-unused and --compact-below. */
extern const char *const ck_max_unused_words[], *const ck_fraction_words[];
/* borg's interval: a number and a unit (S M H d w m y), such as 36H; "0" too when zero_ok.
 * Returns 0 or -1. */
int ck_parse_duration(const char *s, bool zero_ok, int64_t *out);
/* The --grace entry of gc, prune and delete (the target is a struct ck_gc_opts at off). */
#define CK_GRACE_OPT(off) \
	{CLI_OPT(CLI_CALL, "grace", 0, off, "DURATION", \
		 "take a save in flight on another node for dead once its\n" \
		 "marker is DURATION old (default 6H; 0: every other node's\n" \
		 "save is dead, for a job known to be gone)"), \
	 .values = ck_grace_words, .call = ck_gc_option, .code = CK_OPT_GRACE}
extern const char *const ck_grace_words[];
/* Opens the store at path for writing (ck_open_store) with --grace, when given, as its
 * CKPT_OPT_GC_GRACE_S. Returns 0 or an exit status (reported). */
int ck_open_for_gc(const char *cmd, const char *path, const struct ck_gc_opts *g,
		   ckpt_store **out);
/* Parses a fraction from 0 to 1. Returns 0 or -1. */
int ck_parse_fraction(const char *s, double *out);
/* The call of the --max-unused and --compact-below table entries (code CK_OPT_*, target a
 * struct ck_gc_opts): returns 0 or EXIT_USAGE (reported). */
int ck_gc_option(const char *cmd, int c, const char *arg, void *target);
/* Fills in the defaults: max_unused CKPT_GC_MAX_UNUSED_DEFAULT, unless only --compact-below was
 * given (then no limit). */
void ck_gc_finish(struct ck_gc_opts *o);
/* Shows the compaction's progress on a terminal (when enable), until ck_gc_progress_end(). */
void ck_gc_progress(struct ck_gc_opts *o, bool enable);
void ck_gc_progress_end(struct ck_gc_opts *o);
/* The policy as JSON fields compact_below and max_unused. */
void ck_gc_json(struct jw *w, const struct ck_gc_opts *o);

/* removal.c: what delete and prune share. Their argument structs hold a struct ck_removal
 * named rm, which the options of CK_REMOVAL_OPTS fill. */
struct ck_removal {
	struct ck_gc_opts g;
	bool gc, json, dry, force;
};
/* The last options of prune and delete, of their argument struct T: --gc, --max-unused,
 * --compact-below, --dry-run, then --force (its text force_help differs) and --json. */
#define CK_REMOVAL_OPTS(T, force_help) \
	{CLI_OPT(CLI_FLAG, "gc", 0, CLI_AT(T, rm.gc), NULL, \
		 "then collect garbage and compact, as 'ckptctl gc'")}, \
	{CLI_OPT(CLI_CALL, "max-unused", 0, CLI_AT(T, rm.g), "LIMIT", \
		 "with --gc: leave at most LIMIT of the pack bytes as garbage\n" \
		 "(default 10%; see 'ckptctl gc --help')"), \
	 .values = ck_max_unused_words, .call = ck_gc_option, .code = CK_OPT_MAX_UNUSED}, \
	{CLI_OPT(CLI_CALL, "compact-below", 'c', CLI_AT(T, rm.g), "F", \
		 "with --gc: also compact packs whose live share is below F"), \
	 .values = ck_fraction_words, .call = ck_gc_option, .code = CK_OPT_COMPACT_BELOW}, \
	CK_GRACE_OPT(CLI_AT(T, rm.g)), \
	{CLI_OPT(CLI_FLAG, "dry-run", 0, CLI_AT(T, rm.dry), NULL, \
		 "print what would be removed, copied and freed; change nothing")}, \
	{CLI_OPT(CLI_FLAG, "force", 0, CLI_AT(T, rm.force), NULL, force_help)}, \
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(T, rm.json), NULL, \
		 "print a JSON object: dry_run, removed (steps), kept (steps),\n" \
		 "with --gc also gc, compact_below and max_unused, then\n" \
		 "packs_removed, packs_compacted, manifests_rewritten,\n" \
		 "leftovers_removed, bytes_freed and bytes_copied (bytes)")}
/* Checks that --max-unused and --compact-below come with --gc, then fills in their defaults
 * (ck_gc_finish). Returns -1 to go on, or EXIT_USAGE (reported). */
int ck_removal_check(const char *cmd, struct ck_removal *rm);
/* What differs between delete and prune; arg is the command's argument struct. */
struct ck_removal_ops {
	/* Before the check of damaged manifests, with the store's checkpoints (list[0..n),
	 * ascending): resolves what the command names. NULL: nothing to resolve. Returns 0 or an
	 * exit status (reported). */
	int (*prepare)(const char *cmd, const char *path, const ckpt_info *list, int n, void *arg);
	/* The removal: pol is the compaction policy with --gc (else NULL), flags CKPT_GC_DRY_RUN
	 * and CKPT_GC_FORCE from rm. Returns 0 with *rep, or an exit status (reported). */
	int (*remove)(const char *cmd, ckpt_store *store, const ckpt_gc_policy *pol, int flags,
		      void *arg, ckpt_report **rep);
	/* The answer in text (the JSON one is ck_removal_json()). */
	void (*print_text)(bool dry, const ckpt_report *rep, const ckpt_info *list, int n,
			   void *arg);
};
/* Runs delete or prune on the store at path: opens it for writing, lists it, ops->prepare,
 * refuses damaged manifests unless rm->force (ck_check_damaged), ops->remove, then prints the
 * answer. Returns the exit status. */
int ck_removal_run(const char *cmd, const char *path, const struct ck_removal *rm,
		   const struct ck_removal_ops *ops, void *arg);
/* Whether the report lists step among the removed checkpoints. */
bool ck_step_removed(const ckpt_report *r, uint64_t step);
/* The JSON answer of prune and delete on stdout: dry_run, the steps removed and kept (of list, n
 * entries, as listed before), the gc options when gc is not NULL, then the report. */
void ck_removal_json(bool dry, const struct ck_gc_opts *gc, const ckpt_report *rep,
		     const ckpt_info *list, int n);

/* select.c: the Python binding's names and metadata (docs/format.md, "Tensor names of the
 * Python binding"). */
/* Whether rd's tensor names are an older binding's, with '.' and '%' escaped inside keys
 * (%2E, %25): it has the entry libckpt.python and not libckpt.names. */
bool ck_names_escaped(const ckpt_reader *rd);
/* The dotted name of a stored name: malloc'd, %2E and %25 undone in one pass when escaped, else
 * a copy. NULL when out of memory. */
char *ck_dotted(const char *name, bool escaped);
/* Whether key is one of the binding's internal metadata entries (libckpt.python, libckpt.names),
 * which show and diff leave out unless --all. */
bool ck_binding_meta(const char *key);
/* The dotted names of a checkpoint's tensors, for show and diff: name[k] is tensor k's, order the
 * indexes sorted by name (ties in index order). */
struct ck_names {
	size_t n;
	char **name;
	size_t *order;
};
/* Fills t from rd. Returns 0, or EXIT_FAIL reported (t is then empty). */
int ck_names_load(const char *cmd, const ckpt_reader *rd, struct ck_names *t);
/* The lowest index of a tensor whose dotted name is name, or -1; *count (when not NULL): how many
 * have it (more than one only in a checkpoint of old escaped names). */
long ck_names_find(const struct ck_names *t, const char *name, size_t *count);
/* Frees t's names (t may be empty). */
void ck_names_free(struct ck_names *t);
/* export --select: keeps in ts[0..*nt) (and the reader indexes ridx) the tensors whose dotted
 * name (ck_dotted, with escaped) is under subtree (the subtree's text then a dot: whole
 * components), named relative to it; the new names are malloc'd into *names (free each, then the
 * array, also on failure). Returns 0, EXIT_NOTFOUND (nothing under subtree: the message lists the
 * top-level names) or EXIT_FAIL, reported. */
struct st_out_tensor;
int ck_select(const char *cmd, const char *subtree, bool escaped, struct st_out_tensor *ts,
	      size_t *ridx, size_t *nt, char ***names);
/* Removes the Python binding's metadata entries from keys/vals; returns the new count. */
size_t ck_drop_binding_meta(const char **keys, const char **vals, size_t nm);

/* tags.c: the call of an option that takes a tag (import --tag, list --tag, prune --keep-tag;
 * opt its name for messages): checks arg (ckpt_tag_check) and appends it to (*tags)[0..*n).
 * Returns 0, EXIT_USAGE or EXIT_FAIL (reported). */
int ck_tag_option(const char *cmd, const char *opt, const char *arg, const char ***tags,
		  size_t *n);
/* How many tags a ckpt_info.tags list holds. */
size_t tags_in(const char *list);
/* Whether the list holds one of want[0..n). */
bool ck_tags_any(const char *list, const char *const *want, size_t n);
/* The JSON field "tags": an array of the list's tags. */
void ck_tags_json(struct jw *w, const char *list);
/* The JSON keys of every command follow the C API's names (ckpt_stats, ckpt_tensor_info):
 * bytes_new, chunks_new, chunks_reused. The older keys new_bytes, new_chunks and reused_chunks
 * (list, show, import) are printed too, for one version, by this (chunks_reused < 0: not that
 * one). */
void ck_json_aliases(struct jw *w, uint64_t bytes_new, uint64_t chunks_new, int64_t chunks_reused);
/* step, time, sizes, chunks and tags of one checkpoint, as keys of the open JSON object. */
void ck_info_json(struct jw *w, const ckpt_info *i);

/* complete.c: complete_fn of the options whose values come from the store on the command line
 * (struct cli_opt): export --select (the checkpoint's top-level names), --tag and --keep-tag (the
 * store's tags). */
void ck_complete_select(int argc, char **argv);
void ck_complete_tags(int argc, char **argv);

/* dist.c: multi-rank checkpoints in list, show, verify, export and du (nothing for
 * single-process ones). A multi-rank checkpoint is told by its global reader (opened with flags
 * 0): a world of several ranks, or pieces a rank saved (a world of one). */
bool ck_dist_multi(const ckpt_reader *g);
/* list: the world size of each of list[0..n) (0: single-process, or a multi-rank one whose
 * manifest gives no valid world size), or NULL when none is multi-rank (then the table has no
 * RANKS column); free it. */
unsigned *ck_dist_list_worlds(ckpt_store *store, const ckpt_info *list, int n);
/* list: the RANKS column of row k (k < 0: its header); nothing when worlds is NULL. */
void ck_dist_list_col(const unsigned *worlds, int k);
/* list --json: the world_size field of row k, for a multi-rank checkpoint. */
void ck_dist_list_json(struct jw *w, const unsigned *worlds, int k);
/* show: world size and every global tensor with its shards (box, rank, part), replicated ones
 * marked; as text after the tensor table, or as JSON fields world_size and global_tensors. */
void ck_dist_show_text(ckpt_store *store, uint64_t step);
void ck_dist_show_json(struct jw *w, ckpt_store *store, uint64_t step);
/* verify: when step is a multi-rank checkpoint whose layout (world size, part records, shard
 * tables) the library refuses as corrupt, prints that as one damage (as text, or as an object
 * of the JSON array open in w) and returns 1; else 0 (ckpt_reader_verify() checks the parts). */
long ck_dist_verify_layout(ckpt_store *store, uint64_t step, struct jw *w);
/* verify: whether ckpt_reader_verify() reported d for a part file of a multi-rank checkpoint
 * (no tensor, the file STORE/parts/<step>/<rank>.part). */
bool ck_dist_part_damage(const ckpt_damage *d);
/* verify: prints the damaged part d naming its rank (as text, or as an object of the JSON array
 * open in w). */
void ck_dist_part_print(const ckpt_damage *d, struct jw *w);
/* verify: the rank whose pack holds the damaged chunk d (or the damaged pack d) of rd, a reader
 * opened CKPT_READ_AS_SAVED, or -1 (a single-process checkpoint's pack). */
int ck_dist_damage_rank(const ckpt_reader *rd, const ckpt_damage *d);
/* du: the parts of multi-rank checkpoints, as JSON fields parts and part_bytes, or as a line. */
void ck_dist_du_json(struct jw *w, const ckpt_du *du);
void ck_dist_du_text(const ckpt_du *du);

#endif
