/* The node-loss drill of a 4-rank checkpoint: four ranks (threads, each with its own
 * store handle on one shared store) save a row-sharded global tensor and a replicated one, twice;
 * rank 0's handle uploads in the background (CKPT_REMOTE_UPLOAD) after each global commit, every
 * rank's packs and parts before the global manifest. Then the local store is deleted, a fresh one
 * adopts the remote store; the global tensors restore bit-identical read from the remote (range
 * reads, nothing pulled), then pulled (and the parts verify). A damaged part object (a byte
 * flipped, or cut) fails the pull naming it, and no part of it is written. The remote is
 * $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <pthread.h>
#include <stdbool.h>

#include "remote/remote.h"
#include "t-dist-tcomm.h"
#include "t-remote.h"
#include "tier/tier.h"

#define NR 4
enum { ROWS = 256, COLS = 4096, CHUNK = 64 << 10 };

static uint8_t w[ROWS * COLS], bias[COLS * 3];
static const char *store_path, *remote_url;
static struct tc_shared sh;
static struct tc_rank ranks[NR];

static void *rank_main(void *arg)
{
	struct tc_rank *r = arg;
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_THREADS, 1);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(store_path, o, &s) == 0);
	ckpt_options_free(o);
	tc_barrier(r); /* every rank sees the one store rank 0 may have created */
	if (r->rank == 0)
		REQUIRE(rstore_set(s, remote_url, CKPT_REMOTE_UPLOAD) == 0);
	ckpt_comm comm = tc_comm(r);
	uint64_t gshape[2] = {ROWS, COLS}, rows = ROWS / NR;
	uint64_t off[2] = {rows * (uint64_t)r->rank, 0}, ext[2] = {rows, COLS}, bshape[1] = {sizeof bias};
	for (uint64_t step = 1; step <= 2; step++) {
		tc_barrier(r);
		if (r->rank == 0 && step == 2) /* the second checkpoint changes rank 2's rows */
			t_fill(w + 2 * rows * COLS, rows * COLS, 77);
		tc_barrier(r);
		dsave *sv;
		REQUIRE(dsave_begin(s, &comm, step, &sv) == 0);
		CHECK_OK(dsave_add_shard(sv, "w", CKPT_DTYPE_U8, 2, gshape, off, ext,
						  CKPT_MEM_HOST, w + off[0] * COLS));
		CHECK_OK(dsave_add_replicated(sv, "bias", CKPT_DTYPE_U8, 1, bshape,
						       (unsigned)r->rank, NR, CKPT_MEM_HOST, bias));
		CHECK_OK(dsave_commit(sv, NULL));
	}
	if (r->rank == 0) {
		CHECK_OK(rstore_wait_uploaded(s, CKPT_STEP_LATEST, 60000));
		CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_REMOTE);
		CHECK(rstore_upload_state(s, 2) == CKPT_UPLOAD_REMOTE);
	}
	ckpt_store_close(s);
	return NULL;
}

/* The latest checkpoint's global tensors restore bit-identical (and the parts verify once they
 * are local). */
static void check_global(ckpt_store *s, bool parts)
{
	dreader *dr;
	CHECK_OK(dreader_open(s, CKPT_STEP_LATEST, &dr));
	if (!dr)
		return;
	CHECK(dreader_world_size(dr) == NR);
	t_remote_check_whole(dr, "w", 2, (uint64_t[]){ROWS, COLS}, w, sizeof w);
	t_remote_check_whole(dr, "bias", 1, (uint64_t[]){sizeof bias}, bias, sizeof bias);
	if (parts)
		CHECK(dreader_verify_parts(dr, NULL, NULL) == 0);
	CHECK(reader1_verify(dreader_checkpoint(dr), NULL, NULL, NULL) == 0);
	dreader_close(dr);
}

/* Part 2 of step 1 on the remote damaged two ways (a byte flipped inside: its size and trailer
 * kept; cut by one byte): the pull of step 1 fails naming the object, and leaves no part file and
 * no checkpoint; repaired, it pulls and its parts verify. */
static void damaged_part(ckpt_store *s, const char *url, const char *path)
{
	char id[33], key[256], parts[4400];
	struct tier_ref ref = {0};
	ckpt_store_id(s, id);
	snprintf(ref.id, sizeof ref.id, "%s", id);
	tier_key_part(&ref, 1, 2, key, sizeof key);
	snprintf(parts, sizeof parts, "%s/parts/%020d", path, 1);
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	uint64_t size;
	REQUIRE(r->ops->stat(r, key, &size, NULL) == 0);
	uint8_t *b = malloc(size);
	REQUIRE(b && r->ops->get(r, key, 0, size, b) == 0);
	for (int way = 0; way < 2; way++) {
		b[size / 2] ^= way == 0 ? 0x10 : 0;
		struct rmt_src bad = {.buf = b, .len = way == 0 ? size : size - 1};
		REQUIRE(r->ops->put(r, key, &bad, 0, NULL, NULL) == 0);
		b[size / 2] ^= way == 0 ? 0x10 : 0;
		int rc = rstore_pull(s, 1, NULL, NULL, NULL, NULL);
		CHECK(rc == -CKPT_E_CHECKSUM || rc == -CKPT_E_CORRUPT);
		CHECK(strstr(ckpt_errmsg(), key) != NULL);
		printf("damaged part (%s): %s\n", way == 0 ? "a byte flipped" : "cut", ckpt_errmsg());
		CHECK(t_dir_bytes(parts) == 0);
		ckpt_info *list;
		CHECK(ckpt_store_list(s, 1, &list) == 1); /* step 2 only */
		ckpt_info_free(list);
	}
	struct rmt_src good = {.buf = b, .len = size};
	REQUIRE(r->ops->put(r, key, &good, 0, NULL, NULL) == 0);
	rmt_close(r);
	free(b);
	CHECK_OK(rstore_pull(s, 1, NULL, NULL, NULL, NULL));
	dreader *dr;
	CHECK_OK(dreader_open(s, 1, &dr));
	if (dr) {
		CHECK(dreader_verify_parts(dr, NULL, NULL) == 0);
		dreader_close(dr);
	}
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-dist", &cleanup);
	char *dir = t_tmpdir("remote-dist-local");
	char path[4200], path2[4200];
	snprintf(path, sizeof path, "%s/a", dir);
	snprintf(path2, sizeof path2, "%s/b", dir);
	store_path = path;
	remote_url = url;
	t_fill(w, sizeof w, 1);
	t_fill(bias, sizeof bias, 2);
	tc_init(&sh, ranks, NR);
	pthread_t th[NR];
	for (int i = 0; i < NR; i++)
		REQUIRE(pthread_create(&th[i], NULL, rank_main, &ranks[i]) == 0);
	for (int i = 0; i < NR; i++)
		pthread_join(th[i], NULL);

	/* Node loss. */
	t_rmrf(path);
	CHECK_OK(ckpt_remote_adopt(url, NULL, path2));
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path2, NULL, &s) == 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	check_global(s, false); /* read from the remote, nothing pulled */
	uint64_t got = 0;
	ckpt_remote_stats st;
	CHECK_OK(rstore_pull(s, CKPT_STEP_LATEST, &got, &st, NULL, NULL));
	CHECK(got == 2);
	printf("pulled checkpoint %llu: %llu packs, %llu bytes\n", (unsigned long long)got,
	       (unsigned long long)st.packs_sent, (unsigned long long)st.bytes_sent);
	check_global(s, true);
	damaged_part(s, url, path2);
	ckpt_store_close(s);
	return t_remote_done(dir, cleanup, url);
}
