/*
 * reshard-bench — the cost of a 4-way column reshard of row shards.
 *
 * Four ranks (threads, tests/unit/t-dist-world.h) save an F32 [rows, cols] matrix by rows into a
 * fresh store (chunk size --chunk, default 1 MiB); then one reader restores the 4 column boxes
 * [rows, cols / 4] with ckpt_reader_read() of a box region, as a job resharded from 4 row ranks
 * to 4 column ranks does, and checks every element (not timed). For each box it measures the
 * bytes read from the packs (ckpt_reader_stats) against the bytes of the chunks its rows touch
 * (computed here from the chunk size) and against the byte span per shard that the old box
 * restore read (every chunk between the overlap's first and last element), and the time. Reads
 * go through O_DIRECT where the file system allows it, so they are not served from the page
 * cache.
 *
 * Usage: reshard-bench [--rows R] [--cols C] [--chunk BYTES] [--dir DIR]
 * (defaults: 64 x 1048576, rows of 4 MiB, 4 chunks each; DIR defaults to $BENCH_DIR or
 * build/bench/work). Prints its progress on stderr and one JSON object on stdout:
 *   reshard_bytes_read, reshard_bytes_needed, reshard_ratio (read / needed),
 *   reshard_span_bytes (what the old restore read), reshard_seconds, reshard_gbps (box bytes / s),
 *   reshard_same_layout_seconds (the whole matrix restored in its saved layout, for reference).
 * Public API only.
 */
#include <ckpt.h>

#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/unit/t-dist-world.h"

#define NR 4

static uint64_t rows = 64, cols = 1u << 20, chunk = 1u << 20;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float val(uint64_t i, uint64_t j)
{
	return (float)((i * 131 + j) % 16777216);
}

static int save_rank(ckpt_comm *c, void *arg)
{
	ckpt_store *s = ((ckpt_store **)arg)[c->rank];
	uint64_t n = rows / NR, r0 = n * (uint64_t)c->rank;
	float *buf = malloc(n * cols * sizeof *buf);
	if (!buf)
		return -CKPT_E_NOMEM;
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < cols; j++)
			buf[i * cols + j] = val(r0 + i, j);
	uint64_t g[2] = {rows, cols}, o[2] = {r0, 0}, l[2] = {n, cols};
	ckpt_tensor t = {.struct_size = sizeof t, .name = "m", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			 .shape = l, .mem = CKPT_MEM_HOST, .data = buf, .global_shape = g,
			 .offsets = o};
	ckpt_save_options so = {.struct_size = sizeof so, .comm = c};
	ckpt_save *d;
	int rc = ckpt_save_begin(s, 1, &so, &d);
	if (!rc && (rc = ckpt_save_add(d, &t)))
		ckpt_save_abort(d);
	else if (!rc)
		rc = ckpt_save_commit(d, NULL);
	free(buf);
	return rc;
}

/* Bytes of the chunks the rows of the column box [c0, c0 + w) touch, and of the byte span of each
 * shard's overlap rounded out to chunks (the old restore's reads). */
static void model(uint64_t c0, uint64_t w, uint64_t *need, uint64_t *span)
{
	uint64_t n = rows / NR, rb = cols * 4;
	*need = *span = 0;
	for (uint64_t s = 0; s < NR; s++) {
		uint64_t last = UINT64_MAX;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t a = i * rb + c0 * 4, b = a + w * 4;
			for (uint64_t q = a / chunk; q <= (b - 1) / chunk; q++)
				if (q != last) {
					*need += chunk;
					last = q;
				}
		}
		uint64_t first = c0 * 4, end = (n - 1) * rb + (c0 + w) * 4;
		*span += ((end + chunk - 1) / chunk - first / chunk) * chunk;
	}
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static int die(const char *what, int rc)
{
	fprintf(stderr, "reshard-bench: %s: %s\n", what, rc ? ckpt_errmsg() : "failed");
	return 1;
}

static int run(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_store *s[NR];
	int rcs[NR], rc = 0;
	if (!o || ckpt_options_set(o, CKPT_OPT_CREATE, 1) ||
	    ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, (int64_t)chunk))
		return die("options", -1);
	for (int k = 0; k < NR; k++)
		if ((rc = ckpt_store_open(dir, o, &s[k])))
			return die(dir, rc);
	ckpt_options_free(o);
	double t0 = now();
	if (tw_run(NR, save_rank, s, rcs))
		return die("threads", -1);
	for (int k = 0; k < NR; k++)
		if (rcs[k])
			return die("save", rcs[k]);
	fprintf(stderr, "saved %" PRIu64 " MiB by %d ranks in %.2f s\n", rows * cols * 4 >> 20, NR,
		now() - t0);
	ckpt_reader *d;
	if ((rc = ckpt_reader_open(s[0], 1, 0, &d)))
		return die("open", rc);
	uint64_t w = cols / NR, read = 0, need = 0, span = 0;
	float *box = malloc(rows * w * sizeof *box);
	double secs = 0;
	for (uint64_t c = 0; c < NR && box; c++) {
		uint64_t off[2] = {0, c * w}, len[2] = {rows, w}, bn, bs;
		ckpt_region g = {.struct_size = sizeof g, .offsets = off, .lengths = len};
		ckpt_stats a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
		ckpt_reader_stats(d, &a);
		t0 = now();
		if ((rc = ckpt_reader_read(d, 0, &g, CKPT_MEM_HOST, box, rows * w * 4)))
			return die("restore box", rc);
		secs += now() - t0;
		ckpt_reader_stats(d, &b);
		model(c * w, w, &bn, &bs);
		read += b.bytes_read - a.bytes_read;
		need += bn;
		span += bs;
		for (uint64_t i = 0; i < rows; i++)
			for (uint64_t j = 0; j < w; j++)
				if (box[i * w + j] != val(i, c * w + j))
					return die("wrong data", 0);
	}
	if (!box)
		return die("out of memory", 0);
	/* The reference: the same bytes restored in the saved layout (each shard whole). */
	float *all = malloc(rows * cols * sizeof *all);
	uint64_t zero[2] = {0, 0}, whole[2] = {rows, cols};
	ckpt_region all_g = {.struct_size = sizeof all_g, .offsets = zero, .lengths = whole};
	t0 = now();
	if (!all || (rc = ckpt_reader_read(d, 0, &all_g, CKPT_MEM_HOST, all, rows * cols * 4)))
		return die("restore whole", rc);
	double same = now() - t0;
	free(all);
	fprintf(stderr, "4-way column reshard of F32 [%" PRIu64 ", %" PRIu64 "], %" PRIu64
		" KiB chunks: read %" PRIu64 " bytes for chunks of %" PRIu64 " (%.3fx; the byte "
		"span is %" PRIu64 ", %.2fx) in %.3f s; in the saved layout %.3f s\n", rows, cols,
		chunk >> 10, read, need, (double)read / (double)need, span,
		(double)span / (double)need, secs, same);
	printf("{\"reshard_rows\": %" PRIu64 ", \"reshard_cols\": %" PRIu64 ", \"reshard_chunk\": %"
	       PRIu64 ", \"reshard_bytes_read\": %" PRIu64 ", \"reshard_bytes_needed\": %" PRIu64
	       ", \"reshard_ratio\": %.4f, \"reshard_span_bytes\": %" PRIu64 ", \"reshard_seconds\":"
	       " %.4f, \"reshard_gbps\": %.3f, \"reshard_same_layout_seconds\": %.4f}\n", rows, cols,
	       chunk, read, need, (double)read / (double)need, span, secs,
	       (double)(rows * cols * 4) / secs / 1e9, same);
	free(box);
	ckpt_reader_close(d);
	for (int k = 0; k < NR; k++)
		ckpt_store_close(s[k]);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"rows", 1, 0, 'r'}, {"cols", 1, 0, 'c'},
					     {"chunk", 1, 0, 'k'}, {"dir", 1, 0, 'd'}, {0, 0, 0, 0}};
	const char *base = getenv("BENCH_DIR");
	if (!base || !*base)
		base = "build/bench/work";
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': rows = strtoull(optarg, NULL, 0); break;
		case 'c': cols = strtoull(optarg, NULL, 0); break;
		case 'k': chunk = strtoull(optarg, NULL, 0); break;
		case 'd': base = optarg; break;
		default:
			fprintf(stderr, "usage: %s [--rows R] [--cols C] [--chunk BYTES] [--dir DIR]\n",
				argv[0]);
			return 2;
		}
	}
	if (!rows || rows % NR || cols < NR || !chunk) {
		fprintf(stderr, "reshard-bench: rows must be a multiple of %d, cols at least %d\n", NR,
			NR);
		return 2;
	}
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/reshard-bench.%d", base, (int)getpid());
	int rc = run(dir);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
