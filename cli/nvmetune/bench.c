/* bench: a short io_uring sweep over queue depth and I/O size, sequential writes (then fdatasync:
 * a checkpoint is only done when durable) and reads, O_DIRECT like libckpt. It recommends the
 * smallest depth x size within 5% of the best write throughput (less pinned memory for the same
 * speed) and writes it to libckpt's config file as defaults. */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static const unsigned depths[] = {1, 4, 16, 32};
static const unsigned sizes[] = {128 << 10, 512 << 10, 1 << 20, 4 << 20};
#define ND (sizeof(depths) / sizeof(depths[0]))
#define NS (sizeof(sizes) / sizeof(sizes[0]))

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One sequential pass. Returns MiB/s, or a negative -errno. */
static double pass(int fd, bool write, unsigned qd, unsigned bs, uint64_t total, void *buf)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(qd, &ring, 0);
	if (rc < 0)
		return rc;
	uint64_t off = 0, done = 0;
	unsigned inflight = 0;
	double t0 = now_s();
	while (done < total) {
		while (inflight < qd && off < total) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			if (!sqe)
				break;
			unsigned len = total - off < bs ? (unsigned)(total - off) : bs;
			if (write)
				io_uring_prep_write(sqe, fd, buf, len, off);
			else
				io_uring_prep_read(sqe, fd, buf, len, off);
			io_uring_sqe_set_data64(sqe, len);
			off += len;
			inflight++;
		}
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0) {
			io_uring_queue_exit(&ring);
			return rc;
		}
		struct io_uring_cqe *cqes[64];
		unsigned n = io_uring_peek_batch_cqe(&ring, cqes, 64);
		for (unsigned i = 0; i < n; i++) {
			int res = cqes[i]->res;
			if (res < 0 || (uint64_t)res != io_uring_cqe_get_data64(cqes[i])) {
				io_uring_queue_exit(&ring);
				return res < 0 ? res : -EIO;
			}
			done += (unsigned)res;
			inflight--;
		}
		io_uring_cq_advance(&ring, n);
	}
	if (write && fdatasync(fd)) {
		io_uring_queue_exit(&ring);
		return -errno;
	}
	double dt = now_s() - t0;
	io_uring_queue_exit(&ring);
	return (double)total / (1 << 20) / (dt > 1e-9 ? dt : 1e-9);
}

/* Writes s with control bytes as \xNN: a directory name holding a newline must not add lines
 * (settings) to the config file. */
static void put_escaped(FILE *f, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == '\\')
			fprintf(f, "\\x%02x", *p);
		else
			fputc(*p, f);
}

/* Replaces our keys (and our comment) in the config, keeping every other line. */
static int write_config(const char *path, const char *target, unsigned qd, unsigned bs, double mibs)
{
	char *old = NULL;
	int rc = read_file(path, &old, NULL);
	if (rc && rc != -ENOENT)
		return rc;
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (old) {
		/* strsep keeps blank lines; a final empty piece is the file's last newline */
		for (char *rest = old, *l; (l = strsep(&rest, "\n"));) {
			if (!rest && !*l)
				break;
			char t[512], key[64] = "";
			trim_copy(t, sizeof(t), l);
			if (!strncmp(t, "# nvmetune bench", 16))
				continue;
			sscanf(t, "%63[a-z_]", key);
			if (!strcmp(key, "io_queue_depth") || !strcmp(key, "io_size_bytes"))
				continue;
			fprintf(f, "%s\n", l);
		}
		free(old);
	}
	char when[32];
	now_iso(when, sizeof(when));
	fprintf(f, "# nvmetune bench at %s for ", when);
	put_escaped(f, target);
	fprintf(f, ": best write %.0f MiB/s at these settings\n", mibs);
	fprintf(f, "io_queue_depth = %u\nio_size_bytes = %u\n", qd, bs);
	fclose(f);
	rc = write_file_atomic(path, out, len, 0644);
	free(out);
	return rc;
}

struct bench_args {
	uint64_t size;
	const char *config;
	bool noconf, force;
};

static const struct cli_opt bench_opts[] = {
	{CLI_OPT(CLI_SIZE, "size", 0, CLI_AT(struct bench_args, size), "SIZE",
		 "bytes per pass (default 64M: a few seconds in all)"),
	 .min = 4 << 20, .bad = "bad size '%s': at least 4M"},
	{CLI_OPT(CLI_STRING, "config", 0, CLI_AT(struct bench_args, config), "FILE",
		 "where libckpt reads its defaults (default /etc/libckpt.conf; libckpt\n"
		 "looks at $CKPT_CONFIG first)"), .complete = "@file"},
	{CLI_OPT(CLI_FLAG, "no-config", 0, CLI_AT(struct bench_args, noconf), NULL,
		 "only print the recommendation")},
	{CLI_OPT(CLI_FLAG, "force", 'f', CLI_AT(struct bench_args, force), NULL,
		 "use a device the safety checks refuse (its data is lost)")},
	CLI_OPT_END,
};

const struct cli_cmd nt_cmd_bench = {
	.name = "bench", .fn = cmd_bench,
	.help = "io_uring write/read sweep; recommend queue depth and I/O size for libckpt",
	.args = "DEV|DIR", .opts = bench_opts,
	.desc = "Sequential io_uring O_DIRECT writes (each pass ends with fdatasync) and reads over queue\n"
		"depths 1 4 16 32 and I/O sizes 128K 512K 1M 4M; recommends the queue depth and I/O size\n"
		"for libckpt and writes them as io_queue_depth and io_size_bytes to the config file.\n"
		"On a DIR it writes a temporary file (removed at once, so nothing is left behind).\n"
		"On a DEV it overwrites the first SIZE bytes: refused unless the device carries no\n"
		"signature and is not mounted or held, or --force.\n",
};

/* What the sweep measured and recommends. */
struct sweep {
	uint64_t size; /* bytes per pass */
	bool direct;   /* O_DIRECT (false: buffered, where the filesystem refuses it) */
	double wr[ND][NS], rd[ND][NS], best;
	unsigned qd, bs; /* the recommendation */
	double mibs;
};

/* A DIR target: a temporary file of sw->size bytes, unlinked at once. Returns the exit status,
 * the descriptor in *fd. */
static int open_dir_target(const char *target, struct sweep *sw, int *fd)
{
	struct statvfs vfs;
	char path[PATH_MAX];
	if (!statvfs(target, &vfs) && (uint64_t)vfs.f_bavail * vfs.f_frsize < sw->size + (16 << 20)) {
		cli_err("bench: %s: not enough free space for a %llu-byte test file", target,
			(unsigned long long)sw->size);
		return EXIT_FAIL;
	}
	snprintf(path, sizeof(path), "%s/.nvmetune-bench.XXXXXX", target);
	*fd = mkostemp(path, O_CLOEXEC);
	if (*fd < 0) {
		cli_err("bench: %s: cannot create a test file: %s", target, strerror(errno));
		return EXIT_FAIL;
	}
	unlink(path); /* nothing is left behind, even if the run is killed */
	if (fcntl(*fd, F_SETFL, O_DIRECT)) {
		sw->direct = false; /* tmpfs and some others: measure buffered I/O, and say so */
	}
	if (posix_fallocate(*fd, 0, (off_t)sw->size) && ftruncate(*fd, (off_t)sw->size)) {
		cli_err("bench: %s: cannot size the test file: %s", target, strerror(errno));
		close(*fd);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* A DEV target: root, readable, and refused when it holds data (unless force); sw->size shrinks
 * to the device. Returns the exit status, the descriptor in *fd. */
static int open_dev_target(const char *target, bool force, struct sweep *sw, int *fd)
{
	char nm[64], path[PATH_MAX], why[1024];
	int c;
	if (blk_resolve(target, nm, sizeof(nm))) {
		cli_err("bench: %s: no such block device or directory", target);
		return EXIT_NOTFOUND;
	}
	if ((c = nt_need_root("bench")))
		return c;
	dev_path(path, sizeof(path), nm);
	if ((c = nt_check_readable("bench", path)))
		return c;
	if (safety_refuse(nm, why, sizeof(why))) {
		if (!force) {
			cli_err("bench: %s: refused: %s (bench overwrites it; --force to allow)", path, why);
			return EXIT_REFUSED;
		}
		cli_err("bench: %s: %s; overriding (--force)", path, why);
	}
	struct blockdev d;
	if (!blk_info(nm, &d) && d.size && d.size < sw->size)
		sw->size = d.size - d.size % sizes[NS - 1];
	*fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (*fd < 0) {
		cli_err("bench: %s: %s", path, strerror(errno));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* A buffer of the largest I/O size, not zeros: some drives compress or skip them, and the numbers
 * would lie. NULL when out of memory. */
static void *pattern_buf(void)
{
	void *buf;
	if (posix_memalign(&buf, 4096, sizes[NS - 1]))
		return NULL;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < sizes[NS - 1] / 8; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		((uint64_t *)buf)[i] = x;
	}
	return buf;
}

/* Every depth x size, a write pass then a read pass. Returns the exit status (an I/O error stops
 * the sweep). */
static int run_sweep(int fd, void *buf, const char *target, struct sweep *sw)
{
	sw->best = 0;
	for (size_t i = 0; i < ND; i++)
		for (size_t j = 0; j < NS; j++) {
			double *w = &sw->wr[i][j], *r = &sw->rd[i][j];
			*w = pass(fd, true, depths[i], sizes[j], sw->size, buf);
			if (!sw->direct)
				posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			*r = *w < 0 ? *w : pass(fd, false, depths[i], sizes[j], sw->size, buf);
			if (*w < 0 || *r < 0) {
				int e = (int)-(*w < 0 ? *w : *r);
				cli_err("bench: %s: I/O failed at depth %u size %u: %s", target, depths[i],
					sizes[j], strerror(e));
				return EXIT_FAIL;
			}
			if (*w > sw->best)
				sw->best = *w;
		}
	return EXIT_OK;
}

/* The smallest depth x size (the least memory in flight) within 5% of the best write speed. */
static void recommend(struct sweep *sw)
{
	uint64_t mem = UINT64_MAX;
	sw->qd = sw->bs = 0;
	sw->mibs = 0;
	for (size_t i = 0; i < ND; i++)
		for (size_t j = 0; j < NS; j++)
			if (sw->wr[i][j] >= 0.95 * sw->best && (uint64_t)depths[i] * sizes[j] < mem) {
				mem = (uint64_t)depths[i] * sizes[j];
				sw->qd = depths[i];
				sw->bs = sizes[j];
				sw->mibs = sw->wr[i][j];
			}
}

static void report_json(struct jw *w, const char *target, const struct sweep *sw,
			const char *config)
{
	jw_key(w, "target");
	jw_str(w, target);
	jw_key(w, "bytes_per_pass");
	jw_u64(w, sw->size);
	jw_key(w, "o_direct");
	jw_bool(w, sw->direct);
	jw_key(w, "results");
	jw_arr_begin(w);
	for (size_t i = 0; i < ND; i++)
		for (size_t j = 0; j < NS; j++) {
			const struct out_u64 f[] = {{"queue_depth", depths[i]}, {"io_size_bytes", sizes[j]}};
			jw_obj_begin(w);
			out_u64s(w, f, 2);
			jw_key(w, "write_mib_s");
			jw_dbl(w, sw->wr[i][j]);
			jw_key(w, "read_mib_s");
			jw_dbl(w, sw->rd[i][j]);
			jw_obj_end(w);
		}
	jw_arr_end(w);
	const struct out_u64 rec[] = {{"io_queue_depth", sw->qd}, {"io_size_bytes", sw->bs}};
	out_u64s(w, rec, 2);
	out_str(w, "config", config);
}

static void report_text(const char *target, const struct sweep *sw)
{
	printf("%s: %llu MiB per pass%s\n%-6s %-9s %12s %12s\n", target,
	       (unsigned long long)(sw->size >> 20),
	       sw->direct ? ", O_DIRECT" : ", buffered (no O_DIRECT here)", "DEPTH", "IO_SIZE",
	       "WRITE MiB/s", "READ MiB/s");
	for (size_t i = 0; i < ND; i++)
		for (size_t j = 0; j < NS; j++)
			printf("%-6u %-9u %12.0f %12.0f\n", depths[i], sizes[j], sw->wr[i][j], sw->rd[i][j]);
	printf("recommended: io_queue_depth = %u, io_size_bytes = %u (%.0f MiB/s write, within 5%% "
	       "of the best with the least memory in flight)\n", sw->qd, sw->bs, sw->mibs);
}

/* Opens the target, sweeps and recommends. Returns the exit status. */
static int measure(const char *target, bool force, struct sweep *sw)
{
	struct stat st;
	int fd, rc;
	if (stat(target, &st) == 0 && S_ISDIR(st.st_mode))
		rc = open_dir_target(target, sw, &fd);
	else
		rc = open_dev_target(target, force, sw, &fd);
	if (rc)
		return rc;
	void *buf = pattern_buf();
	if (!buf) {
		close(fd);
		cli_err("bench: out of memory");
		return EXIT_FAIL;
	}
	rc = run_sweep(fd, buf, target, sw);
	close(fd);
	free(buf);
	if (!rc)
		recommend(sw);
	return rc;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_args opt = {.size = 64ull << 20, .config = "/etc/libckpt.conf"};
	int c = cli_parse_opts(&nt_cmd_bench, &opt, &argc, argv);
	if (c >= 0)
		return c;
	if (argc != 2)
		return cli_usage_err("bench", "name one device or directory");
	const char *target = argv[1], *config = opt.noconf ? NULL : opt.config;
	struct sweep sw = {.size = opt.size - opt.size % sizes[NS - 1], .direct = true};
	/* Before the sweep, not after it: a config it cannot write is said at once. */
	if (config && (c = nt_check_writable("bench", config, "--config FILE, or --no-config")))
		return c;
	if ((c = measure(target, opt.force, &sw)))
		return c;
	struct jw jwv, *w = out_begin(&jwv);
	if (w)
		report_json(w, target, &sw, config);
	else
		report_text(target, &sw);
	out_end(w);
	if (config) {
		int rc = write_config(config, target, sw.qd, sw.bs, sw.mibs);
		if (rc) {
			cli_err("bench: %s: %s", config, strerror(-rc));
			return EXIT_FAIL;
		}
		if (!w)
			printf("wrote %s\n", config);
	}
	return EXIT_OK;
}
