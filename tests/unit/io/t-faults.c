/* I/O faults (lib/io/io.c's fault engine) at every write, sync and read of a save or restore.
 *
 * Writes and syncs: for N = 1, 2, ... until the save no longer reaches an Nth operation, the Nth
 * pwrite (or fdatasync, or directory fsync) of a save fails with EIO or ENOSPC, or transfers only
 * half (err 0). A failed commit must return -CKPT_E_IO (-CKPT_E_NOSPC for ENOSPC); afterwards no
 * manifest of that step exists (nor a temporary one), no pack file was left behind (after the
 * manifest's rename, packs may be kept for gc), no existing pack was removed, the earlier
 * checkpoints open, verify and restore byte-identical, the same data saved again restores (nothing
 * deduplicates against the failed save) and the same save without faults succeeds. A short write
 * must be retried to completion (or fail as cleanly as an error).
 * Reads: the Nth pread of a restore or verify fails with EIO (restore and verify must report an
 * error, never return wrong data) or is short (everything must still restore identically). */
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "io/io.h"

/* Directory fsyncs (io_fsync_dir) do not go through the fault engine. This definition of fsync()
 * takes precedence over libc's for the statically linked library, so that they can fail too:
 * the dirsync_nth-th call after arming fails with EIO. */
static unsigned long dirsync_nth, dirsync_count, dirsync_fired;

int fsync(int fd)
{
	if (dirsync_nth && ++dirsync_count == dirsync_nth) {
		dirsync_fired++;
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_fsync, fd);
}

static void dirsync_arm(unsigned long nth)
{
	dirsync_count = dirsync_fired = 0;
	dirsync_nth = nth;
}

#define CS (64u << 10)

/* ---- the data of a checkpoint, a function of its seed ------------------------------------ */
struct tdef {
	const char *name;
	ckpt_dtype dt;
	unsigned ndim;
	uint64_t shape[2];
	int shared;  /* same bytes in every checkpoint (deduplicated) */
	int smooth;
};
static const struct tdef TD[] = {
	{"shared", CKPT_DTYPE_U8, 1, {200000}, 1, 0},
	{"w.bf16", CKPT_DTYPE_BF16, 2, {300, 1001}, 0, 1},
	{"w.f32", CKPT_DTYPE_F32, 1, {100003}, 0, 0},
	{"empty", CKPT_DTYPE_F32, 1, {0}, 0, 0},
	{"scalar", CKPT_DTYPE_F64, 0, {0}, 0, 0},
	{"odd", CKPT_DTYPE_U8, 1, {70001}, 0, 1},
};
enum { NT = sizeof TD / sizeof *TD };

static uint64_t tbytes(const struct tdef *t)
{
	uint64_t n = ckpt_dtype_size(t->dt);
	for (unsigned i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static uint8_t *tdata(const struct tdef *t, uint64_t seed)
{
	uint64_t n = tbytes(t);
	uint8_t *b = malloc(n ? n : 1);
	t_fill(b, n, t->shared ? 77 : seed * 131 + (uint64_t)(t - TD));
	if (t->smooth)
		for (uint64_t i = 1; i < n; i += 2)
			b[i] = (uint8_t)(0x3c + (b[i] & 1));
	return b;
}

static ckpt_store *open_store(const char *dir, int compress)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o);
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CS);
	ckpt_options_set(o, CKPT_OPT_COMPRESS, compress);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, 128 << 10); /* many writes per save */
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20); /* more than one pack per save */
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, o, &s);
	ckpt_options_free(o);
	REQUIRE(rc == 0 && s);
	return s;
}

static int save_step(ckpt_store *s, uint64_t step, uint64_t seed)
{
	save1 *sv;
	int rc = save1_begin(s, step, &sv);
	if (rc)
		return rc;
	uint8_t *d[NT];
	for (int i = 0; i < NT; i++) {
		d[i] = tdata(&TD[i], seed);
		rc = save1_add_tensor(sv, TD[i].name, TD[i].dt, TD[i].ndim, TD[i].shape,
					  CKPT_MEM_HOST, d[i]);
		REQUIRE(rc == 0);
	}
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)seed);
	REQUIRE(save1_set_meta(sv, "seed", v) == 0);
	rc = save1_commit(sv, NULL);
	for (int i = 0; i < NT; i++)
		free(d[i]);
	return rc;
}

/* Opens step, verifies it and restores every tensor, comparing with the data of seed.
 * Returns the number of problems (0: intact and identical). */
static int check_step(ckpt_store *s, uint64_t step, uint64_t seed)
{
	reader1 *r;
	int rc = reader1_open(s, step, &r), bad = 0;
	if (rc) {
		fprintf(stderr, "step %llu does not open: %s\n", (unsigned long long)step, ckpt_errmsg());
		return 1;
	}
	long dmg = reader1_verify(r, NULL, NULL, NULL);
	if (dmg != 0) {
		fprintf(stderr, "step %llu: verify returned %ld: %s\n", (unsigned long long)step, dmg,
			ckpt_errmsg());
		bad++;
	}
	const char *sd = reader1_get_meta(r, "seed");
	if (!sd || strtoull(sd, NULL, 10) != seed)
		bad++;
	for (int i = 0; i < NT; i++) {
		long idx = reader1_find(r, TD[i].name);
		uint64_t n = tbytes(&TD[i]);
		uint8_t *want = tdata(&TD[i], seed), *got = malloc(n ? n : 1);
		if (idx < 0 || reader1_restore(r, (size_t)idx, CKPT_MEM_HOST, got, n) ||
		    memcmp(got, want, n)) {
			fprintf(stderr, "step %llu: tensor %s does not restore identically: %s\n",
				(unsigned long long)step, TD[i].name, ckpt_errmsg());
			bad++;
		}
		free(want);
		free(got);
	}
	reader1_close(r);
	return bad;
}

/* ---- directory listings ------------------------------------------------------------------ */
struct listing {
	char **v;
	size_t n;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_dir(const char *dir, const char *sub, struct listing *l)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/%s", dir, sub);
	memset(l, 0, sizeof *l);
	DIR *d = opendir(p);
	REQUIRE(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
		REQUIRE(l->v);
		l->v[l->n++] = strdup(e->d_name);
	}
	closedir(d);
	if (l->n)
		qsort(l->v, l->n, sizeof *l->v, cmp_str);
}

static int same_listing(const struct listing *a, const struct listing *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i], b->v[i]))
			return 0;
	return 1;
}

/* Every name of a is in b. */
static int listing_subset(const struct listing *a, const struct listing *b)
{
	for (size_t i = 0, j = 0; i < a->n; i++) {
		while (j < b->n && strcmp(b->v[j], a->v[i]) < 0)
			j++;
		if (j == b->n || strcmp(b->v[j], a->v[i]))
			return 0;
	}
	return 1;
}

static void print_listing(const char *tag, const struct listing *l)
{
	fprintf(stderr, "  %s:", tag);
	for (size_t i = 0; i < l->n; i++)
		fprintf(stderr, " %s", l->v[i]);
	fprintf(stderr, "\n");
}

static void free_listing(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof *l);
}

#define OP_DIRSYNC 100 /* not an io_fault_op: the fsync() above */

static const char *op_name(int op)
{
	return op == IO_FAULT_WRITE ? "write" : op == IO_FAULT_SYNC ? "sync" :
	       op == OP_DIRSYNC ? "directory fsync" : "read";
}

/* ---- write and sync faults ---------------------------------------------------------------- */
static void save_faults(int compress, int op, int err)
{
	char label[96];
	snprintf(label, sizeof label, "%s fault, err %s, %s", op_name(op),
		 err == EIO ? "EIO" : err == ENOSPC ? "ENOSPC" : "0 (short)",
		 compress ? "zstd" : "raw");
	char *dir = t_tmpdir("faults");
	ckpt_store *s = open_store(dir, compress);
	REQUIRE(save_step(s, 1, 1) == 0);
	uint64_t good_step = 1, good_seed = 1;
	int want = err == ENOSPC ? -CKPT_E_NOSPC : -CKPT_E_IO;
	unsigned long n, failed = 0, completed_short = 0, kept_packs = 0;
	for (n = 1; n < 500; n++) {
		uint64_t step = 100 + n, seed = 1000 + n;
		struct listing packs0, mf0, packs1, mf1;
		list_dir(dir, "packs", &packs0);
		list_dir(dir, "manifests", &mf0);
		if (op == OP_DIRSYNC)
			dirsync_arm(n);
		else
			ckpt_io_fault_arm((enum io_fault_op)op, n, err);
		int rc = save_step(s, step, seed);
		unsigned long fired = op == OP_DIRSYNC ? dirsync_fired : ckpt_io_fault_fired();
		ckpt_io_fault_disarm();
		dirsync_arm(0);
		list_dir(dir, "packs", &packs1);
		list_dir(dir, "manifests", &mf1);
		int stop = 0;
		if (!fired) {
			/* The save has fewer than n such operations: done. */
			CHECK_OK(rc);
			CHECK(check_step(s, step, seed) == 0);
			stop = 1;
		} else if (rc == 0) {
			int bad = check_step(s, step, seed);
			if (err != 0 || op == IO_FAULT_SYNC || op == OP_DIRSYNC) {
				fprintf(stderr, "%s, op %lu: commit returned 0 although the operation "
					"failed (%s)\n", label, n,
					bad ? "and the checkpoint is damaged"
					    : "data intact: the failed operation was retried");
				t_failures++;
			} else if (bad) {
				fprintf(stderr, "%s, op %lu: commit returned 0 after a short transfer but "
					"the checkpoint is damaged (the rest was never written)\n",
					label, n);
				t_failures++;
			} else {
				completed_short++;
			}
			good_step = step;
			good_seed = seed;
		} else {
			failed++;
			if (rc != want && !(err == 0 && rc == -CKPT_E_IO)) {
				fprintf(stderr, "%s, op %lu: commit returned %d (%s), expected %d: %s\n",
					label, n, rc, ckpt_strerror(rc), want, ckpt_errmsg());
				t_failures++;
			}
			/* No manifest for the step, no temporary left, no pack left behind. */
			reader1 *r = NULL;
			CHECK_RC(reader1_open(s, step, &r), -CKPT_E_NOTFOUND);
			reader1_close(r);
			if (!same_listing(&mf0, &mf1)) {
				fprintf(stderr, "%s, op %lu: manifests directory changed by a failed save\n",
					label, n);
				print_listing("before", &mf0);
				print_listing("after", &mf1);
				t_failures++;
			}
			if (!listing_subset(&packs0, &packs1)) {
				fprintf(stderr, "%s, op %lu: a failed save removed existing packs\n",
					label, n);
				print_listing("before", &packs0);
				print_listing("after", &packs1);
				t_failures++;
			} else if (!same_listing(&packs0, &packs1) && op == OP_DIRSYNC) {
				/* After the manifest's rename, whose undo may not be durable either,
				 * its packs are kept (garbage for gc) rather than removed. */
				kept_packs++;
			} else if (!same_listing(&packs0, &packs1)) {
				fprintf(stderr, "%s, op %lu: the failed save left pack files behind\n",
					label, n);
				print_listing("before", &packs0);
				print_listing("after", &packs1);
				t_failures++;
			}
			/* Earlier checkpoints are intact. */
			CHECK(check_step(s, 1, 1) == 0);
			if (good_step != 1)
				CHECK(check_step(s, good_step, good_seed) == 0);
			/* Nothing of the failed save is deduplicated against: the same data saved
			 * as another step restores; then the same save without a fault succeeds. */
			CHECK_OK(save_step(s, step + 10000, seed));
			CHECK(check_step(s, step + 10000, seed) == 0);
			CHECK_OK(save_step(s, step, seed));
			CHECK(check_step(s, step, seed) == 0);
			good_step = step;
			good_seed = seed;
		}
		free_listing(&packs0);
		free_listing(&mf0);
		free_listing(&packs1);
		free_listing(&mf1);
		if (stop)
			break;
	}
	printf("%s: %lu operations faulted in turn; %lu saves failed cleanly (%lu keeping their "
	       "packs for gc), %lu completed despite a short transfer\n", label, n - 1, failed,
	       kept_packs, completed_short);
	CHECK(n > 2); /* every save has several such operations */
	if (err == 0 && op == IO_FAULT_WRITE)
		CHECK(failed + completed_short == n - 1);
	/* Reopened from disk, the store holds exactly the committed checkpoints. */
	ckpt_store_close(s);
	s = open_store(dir, compress);
	CHECK(check_step(s, 1, 1) == 0);
	CHECK(check_step(s, good_step, good_seed) == 0);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* ---- read faults -------------------------------------------------------------------------- */
/* Restores every tensor of step; returns the number of failed restores, and counts mismatches
 * among the successful ones (wrong data: never allowed) in *wrong. */
static int restore_all(ckpt_store *s, uint64_t step, uint64_t seed, int *wrong, int *open_rc)
{
	reader1 *r;
	*open_rc = reader1_open(s, step, &r);
	if (*open_rc)
		return 0;
	int failed = 0;
	for (int i = 0; i < NT; i++) {
		uint64_t n = tbytes(&TD[i]);
		uint8_t *want = tdata(&TD[i], seed), *got = malloc(n ? n : 1);
		long idx = reader1_find(r, TD[i].name);
		REQUIRE(idx >= 0);
		int rc = reader1_restore(r, (size_t)idx, CKPT_MEM_HOST, got, n);
		if (rc) {
			failed++;
			if (rc != -CKPT_E_IO) {
				fprintf(stderr, "restore %s under a read fault: %d (%s), expected -CKPT_E_IO: %s\n",
					TD[i].name, rc, ckpt_strerror(rc), ckpt_errmsg());
				t_failures++;
			}
		} else if (memcmp(got, want, n)) {
			(*wrong)++;
		}
		free(want);
		free(got);
	}
	reader1_close(r);
	return failed;
}

static void read_faults(int compress)
{
	char *dir = t_tmpdir("rfaults");
	ckpt_store *s = open_store(dir, compress);
	REQUIRE(save_step(s, 1, 1) == 0);
	REQUIRE(save_step(s, 2, 2) == 0);
	ckpt_store_close(s);

	/* Does a fault armed after the store was opened reach the reader? */
	s = open_store(dir, compress);
	ckpt_io_fault_arm(IO_FAULT_READ, 1, EIO);
	int wrong = 0, orc;
	int failed = restore_all(s, 2, 2, &wrong, &orc);
	unsigned long fired = ckpt_io_fault_fired();
	ckpt_io_fault_disarm();
	CHECK(wrong == 0);
	if (!fired) {
		fprintf(stderr, "a read fault armed after ckpt_store_open() never fired: the reader "
			"does not use the current I/O engine\n");
		t_failures++;
	} else {
		CHECK(failed > 0);
	}
	ckpt_store_close(s);

	static const int errs[] = {EIO, 0};
	for (size_t e = 0; e < sizeof errs / sizeof *errs; e++) {
		unsigned long n;
		for (n = 1; n < 500; n++) {
			/* restore */
			ckpt_io_fault_arm(IO_FAULT_READ, n, errs[e]);
			s = open_store(dir, compress); /* captures the fault engine */
			wrong = 0;
			failed = restore_all(s, 2, 2, &wrong, &orc);
			fired = ckpt_io_fault_fired();
			ckpt_io_fault_disarm();
			CHECK_OK(orc);
			if (wrong) {
				fprintf(stderr, "read fault %lu (err %d): %d tensors restored WRONG data\n",
					n, errs[e], wrong);
				t_failures++;
			}
			if (fired && errs[e] && !failed) {
				fprintf(stderr, "read fault %lu: EIO fired but every restore succeeded\n", n);
				t_failures++;
			}
			if (!errs[e] && failed) {
				fprintf(stderr, "short read %lu: %d restores failed (%s)\n", n, failed,
					ckpt_errmsg());
				t_failures++;
			}
			ckpt_store_close(s);
			/* verify */
			ckpt_io_fault_arm(IO_FAULT_READ, n, errs[e]);
			s = open_store(dir, compress);
			reader1 *r = NULL;
			CHECK_OK(reader1_open(s, 2, &r));
			long dmg = r ? reader1_verify(r, NULL, NULL, NULL) : 0;
			unsigned long vfired = ckpt_io_fault_fired();
			ckpt_io_fault_disarm();
			reader1_close(r);
			if (vfired && errs[e] && dmg == 0) {
				fprintf(stderr, "read fault %lu: verify reported no damage under EIO\n", n);
				t_failures++;
			}
			if (!errs[e] && dmg != 0) {
				fprintf(stderr, "short read %lu: verify returned %ld\n", n, dmg);
				t_failures++;
			}
			ckpt_store_close(s);
			if (!fired && !vfired)
				break;
		}
		printf("read faults (err %s, %s): %lu reads faulted in turn\n", errs[e] ? "EIO" : "0 (short)",
		       compress ? "zstd" : "raw", n - 1);
		CHECK(n > 2);
	}
	/* Nothing was damaged on disk. */
	s = open_store(dir, compress);
	CHECK(check_step(s, 1, 1) == 0);
	CHECK(check_step(s, 2, 2) == 0);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* keep stdout and stderr in order in the log */
	save_faults(CKPT_COMPRESS_NONE, IO_FAULT_WRITE, EIO);
	save_faults(CKPT_COMPRESS_NONE, IO_FAULT_WRITE, ENOSPC);
	save_faults(CKPT_COMPRESS_NONE, IO_FAULT_WRITE, 0);
	save_faults(CKPT_COMPRESS_ZSTD, IO_FAULT_WRITE, EIO);
	save_faults(CKPT_COMPRESS_NONE, IO_FAULT_SYNC, EIO);
	save_faults(CKPT_COMPRESS_NONE, IO_FAULT_SYNC, ENOSPC);
	save_faults(CKPT_COMPRESS_ZSTD, IO_FAULT_SYNC, 0);
	/* The directory fsync after the manifest's rename: the commit must fail and the manifest
	 * be gone, and nothing may deduplicate against the failed save's chunks. */
	save_faults(CKPT_COMPRESS_NONE, OP_DIRSYNC, EIO);
	read_faults(CKPT_COMPRESS_NONE);
	read_faults(CKPT_COMPRESS_ZSTD);
	ckpt_io_fault_disarm();
	return t_done();
}
