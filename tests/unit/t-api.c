/* The public API as a caller sees it (include/ckpt.h only): one save for one process or many, one
 * reader whose read takes a region, retention in three calls with one report, the remote handle,
 * and struct_size on every struct the caller allocates. The modules under it have their own
 * tests; this one checks that the public objects route each variant to them and keep their
 * contracts. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "helpers.h"
#include "t-dist-tcomm.h"

#define ROWS 512
#define COLS 256 /* 1 KiB rows: a 64 KiB chunk is 64 rows, the matrix 8 chunks */

static float W[ROWS * COLS], B[ROWS];

static ckpt_tensor whole(const char *name, ckpt_dtype dt, unsigned ndim, const uint64_t *shape,
			 const void *data)
{
	return (ckpt_tensor){.struct_size = sizeof(ckpt_tensor), .name = name, .dtype = dt,
			     .ndim = ndim, .shape = shape, .mem = CKPT_MEM_HOST, .data = data};
}

static void save_one(ckpt_store *s, uint64_t step, const char *tag)
{
	static const uint64_t ws[2] = {ROWS, COLS}, bs[1] = {ROWS};
	ckpt_save *sv;
	CHECK_OK(ckpt_save_begin(s, step, NULL, &sv));
	ckpt_tensor w = whole("w", CKPT_DTYPE_F32, 2, ws, W), b = whole("b", CKPT_DTYPE_F32, 1, bs, B);
	CHECK_OK(ckpt_save_add(sv, &w));
	CHECK_OK(ckpt_save_add(sv, &b));
	if (tag)
		CHECK_OK(ckpt_save_add_tag(sv, tag));
	ckpt_stats st = {.struct_size = sizeof st};
	CHECK_OK(ckpt_save_commit(sv, &st));
	CHECK(st.tensors == 2 && st.logical_bytes == sizeof W + sizeof B);
	CHECK(st.struct_size == sizeof st);
}

/* Whole, an element range, a box, a strided box: the same bytes as the saved matrix. */
static void check_regions(ckpt_reader *r, size_t wi)
{
	static float got[ROWS * COLS];
	memset(got, 0, sizeof got);
	CHECK_OK(ckpt_reader_read(r, wi, NULL, CKPT_MEM_HOST, got, sizeof got));
	CHECK(!memcmp(got, W, sizeof W));

	ckpt_region g = {.struct_size = sizeof g, .offset = 5 * COLS + 3, .count = 100};
	CHECK_OK(ckpt_reader_read(r, wi, &g, CKPT_MEM_HOST, got, 100 * sizeof(float)));
	CHECK(!memcmp(got, W + 5 * COLS + 3, 100 * sizeof(float)));

	uint64_t off[2] = {10, 7}, len[2] = {20, 9};
	g = (ckpt_region){.struct_size = sizeof g, .offsets = off, .lengths = len};
	CHECK_OK(ckpt_reader_read(r, wi, &g, CKPT_MEM_HOST, got, 20 * 9 * sizeof(float)));
	int bad = 0;
	for (int i = 0; i < 20; i++)
		bad |= memcmp(got + i * 9, W + (10 + i) * COLS + 7, 9 * sizeof(float));
	CHECK(!bad);

	/* The box into its place in a whole matrix (strides in elements). */
	static float into[ROWS * COLS];
	memset(into, 0, sizeof into);
	uint64_t strides[2] = {COLS, 1};
	g.strides = strides;
	CHECK_OK(ckpt_reader_read(r, wi, &g, CKPT_MEM_HOST, into + 10 * COLS + 7, sizeof into -
				  (10 * COLS + 7) * sizeof(float)));
	CHECK(into[10 * COLS + 7] == W[10 * COLS + 7] && into[29 * COLS + 15] == W[29 * COLS + 15]);
	CHECK(into[9 * COLS + 7] == 0 && into[10 * COLS + 16] == 0);

	g = (ckpt_region){.struct_size = sizeof g, .offset = ROWS * COLS - 1, .count = 2};
	CHECK_RC(ckpt_reader_read(r, wi, &g, CKPT_MEM_HOST, got, 2 * sizeof(float)), -CKPT_E_INVAL);
	g = (ckpt_region){.offset = 0, .count = 1};
	CHECK_RC(ckpt_reader_read(r, wi, &g, CKPT_MEM_HOST, got, sizeof(float)), -CKPT_E_INVAL);
}

static void *dst_all(size_t i, const ckpt_tensor_info *ti, int *mem, void *arg)
{
	float **bufs = arg;
	return ti->struct_size == sizeof *ti ? bufs[i] : NULL;
}

static void one_process(const char *dir)
{
	ckpt_store *s = t_open_store(dir, 64 * 1024, CKPT_COMPRESS_NONE);
	save_one(s, 1, "first");
	ckpt_reader *r;
	CHECK_OK(ckpt_reader_open(s, CKPT_STEP_LATEST, 0, &r));
	CHECK(ckpt_reader_world_size(r) == 1 && ckpt_reader_tensor_count(r) == 2);
	ckpt_info info = {.struct_size = sizeof info};
	CHECK_OK(ckpt_reader_info(r, &info));
	CHECK(info.step == 1 && !strcmp(info.tags, "first"));
	ckpt_info bad_info = {0};
	CHECK_RC(ckpt_reader_info(r, &bad_info), -CKPT_E_INVAL);
	long wi = ckpt_reader_find(r, "w");
	REQUIRE(wi >= 0);
	ckpt_tensor_info ti = {.struct_size = sizeof ti};
	CHECK_OK(ckpt_reader_tensor(r, (size_t)wi, &ti));
	CHECK(ti.shards == 1 && !ti.replicated && ti.nbytes == sizeof W && ti.chunks == 8);
	ckpt_shard sh = {.struct_size = sizeof sh};
	CHECK_OK(ckpt_reader_shard(r, (size_t)wi, 0, &sh));
	CHECK(sh.rank == -1 && sh.tensor == (size_t)wi);
	ckpt_chunk_info ci = {.struct_size = sizeof ci};
	CHECK_OK(ckpt_reader_chunk(r, sh.tensor, 0, &ci));
	CHECK(ci.rank == -1 && ci.is_new && ci.raw_bytes == 64 * 1024);
	check_regions(r, (size_t)wi);

	static float w2[ROWS * COLS], b2[ROWS];
	float *bufs[2] = {w2, b2};
	CHECK_OK(ckpt_reader_read_all(r, dst_all, bufs));
	CHECK(!memcmp(w2, W, sizeof W) && !memcmp(b2, B, sizeof B));
	ckpt_stats st = {.struct_size = sizeof st};
	CHECK_OK(ckpt_reader_stats(r, &st));
	CHECK(st.bytes_read > 0);
	ckpt_verify_cache *vc = ckpt_verify_cache_create();
	CHECK(ckpt_reader_verify(r, vc, NULL, NULL, NULL) == 0);
	uint64_t vbytes = 0, vrecs = 0;
	ckpt_verify_cache_stats(vc, &vbytes, &vrecs);
	CHECK(vrecs == 9 && vbytes > 0);
	ckpt_verify_cache_free(vc);
	ckpt_reader_close(r);

	/* As saved: the same tensors for a one-process checkpoint; no global shard table. */
	CHECK_OK(ckpt_reader_open(s, 1, CKPT_READ_AS_SAVED, &r));
	CHECK(ckpt_reader_tensor_count(r) == 2);
	{
		static float got[100];
		ckpt_region g = {.struct_size = sizeof g, .offset = 7, .count = 100};
		CHECK_OK(ckpt_reader_read(r, (size_t)wi, &g, CKPT_MEM_HOST, got, sizeof got));
		CHECK(!memcmp(got, W + 7, sizeof got));
	}
	CHECK_RC(ckpt_reader_shard(r, 0, 0, &sh), -CKPT_E_STATE);
	ckpt_reader_close(r);
	CHECK_RC(ckpt_reader_open(s, 1, 0x80, &r), -CKPT_E_INVAL);
	ckpt_store_close(s);
}

static void bad_structs(const char *dir)
{
	ckpt_store *s = t_open_store(dir, 64 * 1024, CKPT_COMPRESS_NONE);
	ckpt_save *sv;
	ckpt_save_options o = {0};
	CHECK_RC(ckpt_save_begin(s, 9, &o, &sv), -CKPT_E_INVAL);
	o = (ckpt_save_options){.struct_size = sizeof o, .flags = CKPT_SAVE_THREADED};
	CHECK_RC(ckpt_save_begin(s, 9, &o, &sv), -CKPT_E_INVAL); /* flags need a communicator */
	CHECK_OK(ckpt_save_begin(s, 9, NULL, &sv));
	uint64_t shape[1] = {ROWS};
	ckpt_tensor t = whole("b", CKPT_DTYPE_F32, 1, shape, B);
	t.struct_size = 0;
	CHECK_RC(ckpt_save_add(sv, &t), -CKPT_E_INVAL);
	t = whole("b", CKPT_DTYPE_F32, 1, shape, B);
	t.global_shape = shape; /* a range needs a multi-rank save */
	CHECK_RC(ckpt_save_add(sv, &t), -CKPT_E_INVAL);
	t = whole("b", CKPT_DTYPE_F32, 1, shape, B);
	CHECK_OK(ckpt_save_add(sv, &t));
	CHECK_OK(ckpt_save_submit(sv));
	CHECK_RC(ckpt_save_commit(sv, NULL), -CKPT_E_STATE); /* submitted: wait finishes it */
	CHECK_RC(ckpt_save_release(sv, 0, NULL), -CKPT_E_STATE);
	ckpt_stats st = {0};
	CHECK_RC(ckpt_save_wait(sv, &st), -CKPT_E_INVAL); /* saved, but stats not filled */
	uint64_t step;
	CHECK_OK(ckpt_store_resolve(s, 9, &step));
	ckpt_store_close(s);
}

/* Two ranks (threads) save one global matrix as two row boxes, plus a replicated bias. */
struct rank_arg {
	struct tc_rank *tr;
	const char *dir;
	int rc;
};

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	ckpt_comm c = tc_comm(a->tr);
	ckpt_store *s = t_open_store(a->dir, 64 * 1024, CKPT_COMPRESS_NONE);
	int rank = a->tr->rank;
	ckpt_save_options o = {.struct_size = sizeof o, .comm = &c};
	ckpt_save *sv;
	int rc = ckpt_save_begin(s, 5, &o, &sv);
	if (!rc) {
		uint64_t gs[2] = {ROWS, COLS}, off[2] = {(uint64_t)rank * ROWS / 2, 0};
		uint64_t ls[2] = {ROWS / 2, COLS}, bs[1] = {ROWS};
		ckpt_tensor w = whole("w", CKPT_DTYPE_F32, 2, ls, W + off[0] * COLS);
		w.global_shape = gs;
		w.offsets = off;
		ckpt_tensor b = whole("b", CKPT_DTYPE_F32, 1, bs, B);
		b.replica = (unsigned)rank;
		b.nreplicas = 2;
		if ((rc = ckpt_save_add(sv, &w)) || (rc = ckpt_save_add(sv, &b)))
			fprintf(stderr, "rank %d add: %s\n", rank, ckpt_errmsg());
		rc = rc ? (ckpt_save_abort(sv), rc) : ckpt_save_commit(sv, NULL);
	}
	/* The collective read: rank 1 reads the bias and broadcasts it. */
	ckpt_reader *r;
	if (!rc && !(rc = ckpt_reader_open(s, 5, 0, &r))) {
		static float got[2][ROWS];
		long bi = ckpt_reader_find(r, "b");
		ckpt_region g = {.struct_size = sizeof g, .comm = &c, .root = 1};
		rc = bi < 0 ? (int)bi : ckpt_reader_read(r, (size_t)bi, &g, CKPT_MEM_HOST, got[rank],
							 sizeof B);
		if (!rc && memcmp(got[rank], B, sizeof B))
			rc = -CKPT_E_CHECKSUM;
		ckpt_reader_close(r);
	}
	ckpt_store_close(s);
	a->rc = rc;
	return NULL;
}

static void multi_rank(const char *dir)
{
	static struct tc_shared sh;
	struct tc_rank tr[2];
	tc_init(&sh, tr, 2);
	struct rank_arg a[2];
	pthread_t th[2];
	for (int k = 0; k < 2; k++) {
		a[k] = (struct rank_arg){.tr = &tr[k], .dir = dir};
		pthread_create(&th[k], NULL, rank_main, &a[k]);
	}
	for (int k = 0; k < 2; k++) {
		pthread_join(th[k], NULL);
		CHECK_OK(a[k].rc);
	}
	ckpt_store *s = t_open_store(dir, 64 * 1024, CKPT_COMPRESS_NONE);
	ckpt_reader *r;
	CHECK_OK(ckpt_reader_open(s, 5, 0, &r));
	CHECK(ckpt_reader_world_size(r) == 2 && ckpt_reader_tensor_count(r) == 2);
	long wi = ckpt_reader_find(r, "w"), bi = ckpt_reader_find(r, "b");
	REQUIRE(wi >= 0 && bi >= 0);
	ckpt_tensor_info ti = {.struct_size = sizeof ti};
	CHECK_OK(ckpt_reader_tensor(r, (size_t)wi, &ti));
	CHECK(ti.shards == 2 && !ti.replicated && ti.chunks == 8 && ti.shape[0] == ROWS);
	CHECK_OK(ckpt_reader_tensor(r, (size_t)bi, &ti));
	CHECK(ti.shards == 1 && ti.replicated);
	ckpt_shard sh1 = {.struct_size = sizeof sh1};
	CHECK_OK(ckpt_reader_shard(r, (size_t)wi, 1, &sh1));
	CHECK(sh1.rank == 1 && sh1.offsets[0] == ROWS / 2);
	ckpt_chunk_info ci = {.struct_size = sizeof ci};
	CHECK_OK(ckpt_reader_chunk(r, sh1.tensor, 0, &ci));
	CHECK(ci.rank == 1);
	check_regions(r, (size_t)wi);
	CHECK(ckpt_reader_verify(r, NULL, NULL, NULL, NULL) == 0);
	ckpt_reader_close(r);
	CHECK_OK(ckpt_reader_open(s, 5, CKPT_READ_AS_SAVED, &r));
	CHECK(ckpt_reader_world_size(r) == 2 && ckpt_reader_tensor_count(r) >= 3);
	ckpt_reader_close(r);
	ckpt_store_close(s);
}

static void retention_and_remote(const char *dir, const char *rdir)
{
	ckpt_store *s = t_open_store(dir, 64 * 1024, CKPT_COMPRESS_NONE);
	for (uint64_t k = 1; k <= 4; k++) {
		W[0] = (float)k; /* each step writes one new chunk */
		save_one(s, k, k == 2 ? "keep" : NULL);
	}
	ckpt_remote *rm;
	CHECK_RC(ckpt_remote_open(s, rdir, 0x80, &rm), -CKPT_E_INVAL);
	REQUIRE(ckpt_remote_open(s, rdir, 0, &rm) == 0);
	CHECK(!strcmp(ckpt_remote_url(rm), rdir));
	ckpt_remote_stats rs = {.struct_size = sizeof rs};
	for (uint64_t k = 1; k <= 4; k++)
		CHECK_OK(ckpt_remote_push(rm, k, &rs, NULL, NULL));
	CHECK(rs.packs_present > 0);
	ckpt_info *list;
	CHECK(ckpt_remote_list(rm, 0, &list) == 4);
	ckpt_info_free(list);
	CHECK(ckpt_remote_state(rm, 4) == CKPT_UPLOAD_REMOTE);

	const char *tags[1] = {"keep"};
	ckpt_retention keep = {.struct_size = sizeof keep, .keep_last = 1, .keep_tags = tags,
			       .n_keep_tags = 1};
	ckpt_report *rep;
	CHECK_OK(ckpt_store_prune(s, &keep, NULL, CKPT_GC_DRY_RUN, &rep));
	REQUIRE(rep);
	CHECK(rep->n_steps_removed == 2 && rep->steps_removed[0] == 1 && rep->steps_removed[1] == 3);
	CHECK(rep->n_choices == 4 && rep->choices[1].rule == CKPT_KEEP_TAG &&
	      rep->choices[3].rule == CKPT_KEEP_LAST && rep->choices[0].rule == CKPT_KEEP_NONE);
	ckpt_report_free(rep);
	CHECK_OK(ckpt_store_prune(s, &keep, NULL, 0, &rep));
	CHECK(rep->n_steps_removed == 2);
	ckpt_report_free(rep);
	ckpt_info *left;
	CHECK(ckpt_store_list(s, 0, &left) == 2);
	CHECK(left[0].struct_size == sizeof *left);
	ckpt_info_free(left);

	/* The remote: the same calls with CKPT_GC_REMOTE; it is never compacted. */
	ckpt_gc_policy gc = {.struct_size = sizeof gc, .compact_below = 0.5, .max_unused = 1};
	CHECK_RC(ckpt_store_gc(s, &gc, CKPT_GC_REMOTE, NULL), -CKPT_E_UNSUPPORTED);
	keep.keep_tags = NULL;
	keep.n_keep_tags = 0;
	CHECK_OK(ckpt_store_prune(s, &keep, NULL, CKPT_GC_REMOTE, &rep));
	CHECK(rep->n_steps_removed == 3 && rep->steps_removed[2] == 3);
	ckpt_report_free(rep);
	CHECK(ckpt_remote_list(rm, 0, &list) == 1);
	ckpt_info_free(list);
	CHECK_OK(ckpt_store_gc(s, NULL, CKPT_GC_REMOTE, &rep));
	ckpt_report_free(rep);
	CHECK_OK(ckpt_store_gc(s, &gc, 0, &rep));
	ckpt_report_free(rep);
	uint64_t two = 2, four = 4;
	CHECK_RC(ckpt_store_delete(s, &four, 1, NULL, 0, NULL), -CKPT_E_INVAL); /* the newest */
	CHECK_RC(ckpt_store_delete(s, &two, 1, NULL, CKPT_GC_REMOTE, NULL), -CKPT_E_UNSUPPORTED);
	CHECK_OK(ckpt_store_delete(s, &two, 1, NULL, 0, NULL));
	ckpt_remote_close(rm);
	/* A remote left open is the store's to free. */
	CHECK_OK(ckpt_remote_open(s, rdir, 0, &rm));
	ckpt_store_close(s);
}

int main(void)
{
	t_fill(W, sizeof W, 1);
	t_fill(B, sizeof B, 2);
	char *d1 = t_tmpdir("api1"), *d2 = t_tmpdir("api2"), *d3 = t_tmpdir("api3");
	char *d4 = t_tmpdir("api4"), *rt = t_tmpdir("api-remote");
	char *rd = realpath(rt, NULL); /* a remote is a url or an absolute path */
	REQUIRE(rd);
	one_process(d1);
	bad_structs(d2);
	multi_rank(d3);
	retention_and_remote(d4, rd);
	t_rmrf(d1);
	t_rmrf(d2);
	t_rmrf(d3);
	t_rmrf(d4);
	t_rmrf(rd);
	char *all[] = {d1, d2, d3, d4, rt, rd};
	for (size_t k = 0; k < sizeof all / sizeof *all; k++)
		free(all[k]);
	return t_done();
}
