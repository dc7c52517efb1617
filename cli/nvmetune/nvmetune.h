/* nvmetune internals: one header shared by the files of the tool, each of which owns one concern
 * (sysfs layer, text/JSON output, knobs and profiles, plan/apply/rollback, state file, NVMe via
 * libnvme, RAID via mdadm, safety checks via libblkid, persist, bench, status). Nothing here is a
 * public API. */
#ifndef NVMETUNE_H
#define NVMETUNE_H

#include "cli.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit statuses beyond those of cli.h (documented in docs/nvmetune.1). */
enum {
	EXIT_PARTIAL = 5, /* apply/rollback: some setting failed or did not take on read-back */
	EXIT_REFUSED = 6, /* a device was refused by the safety checks (use --force) */
	EXIT_PERM = 7,    /* permission denied: not root, a device or file it cannot read or write */
	EXIT_DRIFT = 8,   /* plan --check: some knob is not at the profile's target */
};

/* ---- global options (main.c) ------------------------------------------------------------- */
struct nt_opts {
	char sys_root[PATH_MAX];  /* "/sys" or a fake tree (--sysfs-root, NVMETUNE_SYSFS_ROOT) */
	char dev_root[PATH_MAX];  /* "/dev" or a fake tree (--dev-root, NVMETUNE_DEV_ROOT) */
	char proc_root[PATH_MAX]; /* "/proc" or a fake tree (--proc-root, NVMETUNE_PROC_ROOT) */
	char state_file[PATH_MAX];
	bool json;
	bool moved; /* any root moved: fault injection allowed, root check skipped */
};
extern struct nt_opts nt;

/* Returns EXIT_OK when the caller may change the system, or prints why not and returns EXIT_PERM.
 * Skipped when the roots are moved (tests run against a fake tree). */
int nt_need_root(const char *cmd);

/* perm.c: EXIT_OK, or prints that permission is denied (naming path and what to do) and returns
 * EXIT_PERM: path cannot be opened for reading; path (or, when it does not exist, its directory)
 * cannot be written (hint: another way, such as "--no-config"; may be NULL). */
int nt_check_readable(const char *cmd, const char *path);
/* The advice after a permission error e into buf: "run as root", unless root (then what denies
 * root: a device cgroup or security policy for EPERM/EACCES, a read-only mount for EROFS). */
const char *nt_perm_hint(int e, bool root, char *buf, size_t len);
int nt_check_writable(const char *cmd, const char *path, const char *hint);

/* raidops.c: raid add MD DEV..., raid replace MD OLD NEW, raid assemble [MD DEV...]. */
int raid_add(int argc, char **argv);
int raid_replace(int argc, char **argv);
int raid_assemble(int argc, char **argv);
/* Their options (--dry-run, -n; --force, -f), also those of raid stop, into struct nt_raid_flags. */
struct nt_raid_flags {
	bool dry, force;
};
extern const struct cli_opt nt_raid_flag_opts[];
extern const struct cli_cmd nt_cmd_raid_add, nt_cmd_raid_replace, nt_cmd_raid_assemble;
/* The md array named by arg (mdN, /dev/mdN) into nm. Returns 0 or EXIT_NOTFOUND (reported as
 * "CMD: ARG: no such md array"). */
int nt_md_resolve(const char *cmd, const char *arg, char *nm, size_t len);
/* Whether md (a kernel name) is an active array; its level (empty when inactive) into level. */
bool nt_md_active(const char *md, char *level, size_t len);
/* The array arg names (/dev/mdN, mdN) into md, for a new array: 0, a usage error ("bad WHAT")
 * or EXIT_FAIL when it is already active (reported). */
int nt_md_new(const char *cmd, const char *arg, const char *what, char *md, size_t len);
/* Runs an mdadm argv. Returns EXIT_OK, or EXIT_FAIL after saying that mdadm is missing or failed. */
int nt_mdadm_run(const char *cmd, char **av);

/* mddrv.c: whether this kernel runs md arrays, checked before mdadm (which, without md, makes a
 * /dev/mdN node it leaves behind): /proc/mdstat, its Personalities line for level ("0", "10";
 * NULL: md alone), and the modules of /lib/modules/RELEASE for what is missing, which a real run
 * loads with modprobe and a dry run prints as modprobe lines. With moved roots only the fake
 * /proc/mdstat counts. Returns EXIT_OK, or EXIT_FAIL after saying "this kernel has no md driver",
 * what was looked at and how to fix it. */
int nt_md_driver(const char *cmd, const char *level, bool dry);
/* A dry run's view of the same check: it never refuses (the plan is shown all the same) but
 * says, in warning, why a real run would ("" when it would not); load[0..nload) are the modules
 * a real run would load with modprobe (md_mod, raid0, raid10). */
struct nt_md_plan {
	char load[2][16];
	int nload;
	char warning[2 * PATH_MAX + 768];
};
/* nt_md_driver(); a dry run (dry) fills plan instead of printing when plan is not NULL, and
 * warns (returning EXIT_OK) where a real run refuses. */
int nt_md_check(const char *cmd, const char *level, bool dry, struct nt_md_plan *plan);
/* Whether a modules.dep or modules.builtin text names module mod ('-' and '_' alike). */
bool nt_modlist_has(const char *list, const char *mod);

/* persist_md.c: when md arrays are active, writes their ARRAY lines into nvmetune's block of conf
 * (mdadm.conf) and, when initramfs, rebuilds the initramfs (update-initramfs -u, or dracut -f);
 * a dry run prints each change (verbose: print what is done). Returns an exit status. */
int persist_md(const char *conf, bool dry, bool initramfs, bool verbose);

/* ---- output (out.c): text, or with --json one JSON document on stdout ----------------------- */
struct jw;
/* With --json: starts the document (an object) in w and returns w; else returns NULL (text). */
struct jw *out_begin(struct jw *w);
/* Ends the document out_begin started (nothing when w is NULL). */
void out_end(struct jw *w);
/* Writes key, and null when the value is missing: returns have (true: write the value now). */
bool out_key(struct jw *w, const char *key, bool have);
/* Writes key and the string s, or null when s is NULL. */
void out_str(struct jw *w, const char *key, const char *s);
/* Writes the n keys of f with their strings (null for NULL), in order. */
struct out_kv {
	const char *key, *v;
};
void out_strs(struct jw *w, const struct out_kv *f, size_t n);
/* Writes the n keys of f with their unsigned values, in order. */
struct out_u64 {
	const char *key;
	uint64_t v;
};
void out_u64s(struct jw *w, const struct out_u64 *f, size_t n);

/* ---- sysfs layer with a movable root (sysfs.c) ------------------------------------------------
 * Every access to /sys, /dev and /proc goes through here so that tests can point the tool at a
 * fake tree. Paths given to these functions are relative to the root ("block/nvme0n1/queue/..."). */
void sys_path(char *buf, size_t len, const char *rel);
void dev_path(char *buf, size_t len, const char *name);
void proc_path(char *buf, size_t len, const char *rel);
bool sys_exists(const char *rel);
bool sys_is_dir(const char *rel);
/* Reads an attribute, trailing whitespace removed. Returns 0 or -errno. */
int sys_read(const char *rel, char *buf, size_t len);
/* Reads an attribute as an unsigned integer. Returns 0 or -errno (-EINVAL when not a number). */
int sys_read_u64(const char *rel, uint64_t *out);
/* Writes value to an attribute (one write(2), like `echo`). Returns 0 or -errno. With a moved root,
 * a sidecar file "ATTR.fail" holding an errno name (EINVAL, EPERM, ...) makes the write fail with
 * it, and "ATTR.sticky" makes it succeed without changing anything: fault injection for tests,
 * modelled on what real sysfs does (EINVAL for out-of-range values, md's scheduler ignores writes). */
int sys_write(const char *rel, const char *value);
/* Lists the entries of a directory whose names start with prefix (NULL: all but dot entries),
 * sorted naturally (nvme2n1 before nvme10n1). Returns the count (names in *out, free with
 * names_free) or -errno. */
int sys_list(const char *rel, const char *prefix, char ***out);
void names_free(char **names, int n);
/* sys_list, keeping only the names keep accepts. */
int sys_list_keep(const char *rel, const char *prefix, bool (*keep)(const char *name), char ***out);
/* Natural-order comparison for qsort of char* arrays. */
int natcmp(const void *a, const void *b);
/* Extracts the selected word of "[none] mq-deadline" style attributes; copies as-is otherwise. */
void bracket_value(const char *raw, char *out, size_t len);
/* Returns true when word is one of the words of a "[a] b c" attribute. */
bool bracket_has(const char *raw, const char *word);
/* Copies s trimmed into out. */
void trim_copy(char *out, size_t len, const char *s);

/* ---- block devices (blockdev.c) ------------------------------------------------------------ */
enum dev_kind { DK_NVME, DK_MD, DK_OTHER };
struct blockdev {
	char name[64];     /* kernel name: nvme0n1, md0 */
	enum dev_kind kind;
	char ctrl[64];     /* NVMe controller (nvme0) for namespaces */
	char array[64];    /* md array holding this device, if any */
	uint64_t size;     /* bytes */
	uint64_t chunk;    /* md: chunk size in bytes (0: none) */
	uint64_t io_opt;   /* queue/optimal_io_size */
	int data_disks;    /* md: members that carry distinct data (stripe = chunk * data_disks) */
};
/* Resolves "nvme0n1", "/dev/nvme0n1" or "/dev/md/NAME" to a kernel name. Returns 0 or -ENOENT. */
int blk_resolve(const char *arg, char *name, size_t len);
/* Fills d for a kernel name. Returns 0 or -ENOENT. */
int blk_info(const char *name, struct blockdev *d);
/* Whether a kernel name is an md array (block/NAME/md exists). */
bool blk_is_md(const char *name);
/* Lists the NVMe namespaces and md arrays (the tool's default device set). */
int blk_default_set(char ***out);
/* NVMe controller of a namespace ("nvme0n1" -> "nvme0"), or "" when not NVMe. */
void nvme_ctrl_of(const char *ns, char *ctrl, size_t len);

/* ---- NVMe via libnvme (nvme.c) ---------------------------------------------------------------
 * libnvme 1.3 reads /sys at fixed paths, so it is only used for admin commands on an open
 * controller node (identify, get/set features); failures mean "unknown", never a crash. */
struct nvme_info {
	bool have_id;         /* identify succeeded */
	int vwc_present;      /* -1 unknown, 0/1 */
	int vwc_enabled;      /* -1 unknown, 0/1 (feature 0x06) */
	int apst_supported;   /* -1 unknown, 0/1 (identify apsta) */
	int apst_enabled;     /* -1 unknown, 0/1 (feature 0x0c) */
	int nsqa, ncqa;       /* I/O queues allocated (feature 0x07), -1 unknown */
	unsigned mdts;
	char why[96];         /* why the information is unknown */
};
void nvme_query(const char *ctrl, struct nvme_info *ni);

/* Drive health from the SMART / health log (log page 0x02, controller-wide). */
struct nvme_health {
	bool have;               /* the log was read */
	unsigned crit_warning;   /* bit field; 0 is healthy */
	unsigned percent_used;   /* endurance used, may exceed 100 */
	unsigned avail_spare, spare_thresh;
	uint64_t media_errors;   /* low 64 bits of the 128-bit counter */
	int temp_c;              /* composite temperature */
	char why[96];
};
void nvme_health_query(const char *ctrl, struct nvme_health *h);

/* The LBA formats of namespace nsid (identify namespace): data size of each, metadata, relative
 * performance (0 best), which is in use, and the best for checkpoints: 4 KiB without metadata
 * when there is one (what O_DIRECT alignment and large writes want), else the largest data size
 * without metadata. */
struct nvme_lba {
	bool have;
	unsigned n;              /* formats */
	unsigned cur, best;      /* indexes */
	struct { uint32_t bytes; unsigned ms, rp; } f[64];
	char why[96];
};
void nvme_lba_query(const char *ctrl, unsigned nsid, struct nvme_lba *l);
/* Volatile write cache feature: returns 0/1, or -errno / NVMe status (>1) on failure. */
int nvme_vwc_get(const char *ctrl, char *why, size_t len);
int nvme_vwc_set(const char *ctrl, bool on, char *why, size_t len);

/* ---- knobs and profiles (knobs.c, profile.c) ------------------------------------------------- */
enum knob_id {
	K_ASPM,          /* global: /sys/module/pcie_aspm/parameters/policy */
	K_APST,          /* controller: power/pm_qos_latency_tolerance_us (0 = APST off) */
	K_VWC,           /* controller: NVMe volatile write cache feature, via libnvme */
	K_SCHEDULER,     /* block: queue/scheduler (before nr_requests: a change resets it) */
	K_NR_REQUESTS,
	K_READ_AHEAD,
	K_MAX_SECTORS,
	K_WRITE_CACHE,
	K_COUNT
};
const char *knob_name(enum knob_id k);
int knob_by_name(const char *s);

enum tgt_kind { TG_KEEP, TG_AUTO, TG_DEFAULT, TG_VALUE };
struct target {
	enum tgt_kind kind;
	char value[64];
};
struct profile {
	char name[PATH_MAX];
	struct target t[K_COUNT];
};
/* Loads "checkpoint", "default" or a profile file. Returns 0, or prints why and returns
 * EXIT_USAGE (bad name/file contents) or EXIT_NOTFOUND (file missing). */
int profile_load(const char *spec, struct profile *p);
/* The built-in profile names, NULL-terminated (the values --profile completes). */
extern const char *const nt_profile_words[];

enum item_state {
	IS_SAME,        /* already at target */
	IS_CHANGE,      /* will change */
	IS_NA,          /* the profile's automatic rule does not apply to this device */
	IS_UNSUPPORTED, /* an explicit target the device cannot take */
	IS_ERROR,       /* the current value cannot be read */
};
struct item {
	enum knob_id knob;
	char dev[64];     /* "global", "nvme0", "nvme0n1", "md0" */
	char key[192];    /* state key: "sys:REL" or "nvme:CTRL:vwc" */
	char cur[96];
	char tgt[96];
	char why[192];
	enum item_state st;
	bool explicit_tgt; /* the target came from a literal value in a profile file */
	int order;         /* write order: global, controllers, members, arrays; knob order inside */
};
struct plan {
	struct item *it;
	int n, cap;
};
/* Builds the plan for a device list (NULL/0: the default set). Returns 0 or an exit status after
 * printing why. */
int plan_build(const struct profile *p, char **devs, int ndev, struct plan *pl);
void plan_free(struct plan *pl);
/* profile_load (prof: NULL for checkpoint) into p, then plan_build into pl: 0 or the exit status
 * of the first that fails (reported). */
int plan_load(const char *prof, char **devs, int ndev, struct profile *p, struct plan *pl);
/* format.c: the format steps plan shows (an NVMe namespace whose best LBA format is not the one
 * in use), as text lines or a JSON "format_steps" array. */
void format_advice(struct jw *w, const struct plan *pl);
int cmd_format(int argc, char **argv);
/* Reads the current value behind a state key, normalized. Returns 0 or -errno. */
int key_read(enum knob_id k, const char *key, char *out, size_t len, char *why, size_t wlen);
/* Writes a value behind a state key. Returns 0 or -errno (why filled). */
int key_write(enum knob_id k, const char *key, const char *val, char *why, size_t wlen);

/* ---- state file (state.c) ---------------------------------------------------------------------- */
struct saved {
	enum knob_id knob;
	char dev[64];
	char key[192];
	char prev[96];
	int order;
};
struct state {
	char profile[PATH_MAX];
	char created[32];
	struct saved *s;
	int n, cap;
};
/* Returns 0, -ENOENT when there is no state file, or another -errno / -EINVAL (bad contents). */
int state_load(const char *path, struct state *st);
int state_save(const char *path, const struct state *st);
void state_free(struct state *st);
/* Adds an entry unless the key is already saved (the first saved value is the one to restore). */
void state_add(struct state *st, const struct item *it);

/* ---- commands ----------------------------------------------------------------------------------- */
int cmd_status(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_rollback(int argc, char **argv);
int cmd_raid(int argc, char **argv);
int cmd_persist(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* The commands with their option tables (cli.h), each in its file. */
extern const struct cli_cmd nt_cmd_status, nt_cmd_plan, nt_cmd_apply, nt_cmd_rollback, nt_cmd_raid,
	nt_cmd_persist, nt_cmd_format, nt_cmd_bench;

/* ---- md arrays (raid.c) ---- */
/* Lists the active md arrays. Returns the count or -errno. */
int raid_list(char ***out);
/* Prints arrays as text lines, or a JSON array when w is given. */
void raid_report(struct jw *w, char **names, int n);

/* ---- safety checks (safety.c) ------------------------------------------------------------------ */
/* Why a device must not be overwritten: fills reason and returns true when refused. */
bool safety_refuse(const char *name, char *reason, size_t len);
/* Returns true when the device (or one of its partitions) is mounted. */
bool dev_mounted(const char *name, char *where, size_t len);

/* ---- helpers (util.c) ---------------------------------------------------------------------------- */
/* Creates a directory and its parents. Returns 0 or -errno. */
int mkdir_p(const char *dir);
/* Takes the lock beside the state file for apply/rollback. Returns EXIT_OK, or prints why and
 * returns EXIT_BUSY (held by another run) or EXIT_FAIL. */
int lock_state(const char *cmd);
/* Writes data to path atomically (temporary file + rename), creating the parent directory. */
int write_file_atomic(const char *path, const char *data, size_t len, int mode);
/* Room for one more of n elements of size bytes in arr (capacity *cap, first when empty, doubled
 * when full): returns the array, maybe moved. Out of memory: says so and exits (EXIT_FAIL). */
void *array_room(void *arr, int n, int *cap, int first, size_t size);
/* Reads a whole file (NUL-terminated). Returns 0 or -errno. */
int read_file(const char *path, char **data, size_t *len);
/* Runs argv (execvp, stdin /dev/null). Returns the exit status, or -errno when it cannot start. */
int run_argv(char *const argv[]);
/* Prints argv as one shell-quoted command line. */
void print_argv(FILE *f, char *const argv[]);
const char *errno_name(int err);
int errno_from_name(const char *s);
void now_iso(char *buf, size_t len);

#endif
