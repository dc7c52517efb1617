/* dreader_restore_shared (the C form): a replicated entry restored
 * by every rank of a job is read from the store by one rank and broadcast through ckpt_comm.
 * 4 ranks (threads, t-dist-tcomm.h) save the scenario of t-dist-scen.h; then each restores "emb"
 * with root 1: every rank gets every byte, only root reads pack bytes (the others' readers read
 * none). A damaged chunk: -CKPT_E_CHECKSUM on every rank, the others' message naming root, and
 * nobody waits for data that never comes. A rank with a wrong buffer size: -CKPT_E_INVAL on every
 * rank. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TC_MAXR 1280 /* TC_BUF = 640 KiB: emb (1000 x 320 x 2 bytes) in one broadcast */
#include "helpers.h"
#include "t-dist-scen.h"
#include "t-dist-world.h"

#define NR 4
#define STEP 1
#define ROOT 1

struct shared_run {
	const char *dir;
	int bad_rank;             /* passes a wrong size, or -1 */
	uint64_t bytes_read[NR];  /* by each rank's reader */
	long diff[NR];            /* bytes that differ from the saved data, or -1 */
	char msg[NR][256];
};

static int save_main(ckpt_comm *c, void *arg)
{
	ckpt_stats st;
	ckpt_store *s = t_open_store(arg, SCEN_CHUNK, 0);
	int rc = s ? scen_save(s, c, STEP, &st) : -CKPT_E_IO;
	ckpt_store_close(s);
	return rc;
}

static int restore_main(ckpt_comm *c, void *arg)
{
	struct shared_run *sr = arg;
	int k = c->rank;
	size_t n = (size_t)E_ROWS * E_COLS;
	uint16_t *e = calloc(n, sizeof *e);
	ckpt_store *s = t_open_store(sr->dir, SCEN_CHUNK, 0);
	dreader *d = NULL;
	int rc = !e || !s ? -CKPT_E_NOMEM : dreader_open(s, STEP, &d);
	long idx = rc ? -1 : dreader_find(d, "emb");
	uint64_t size = n * sizeof *e - (k == sr->bad_rank ? 2 : 0);
	/* every rank reaches the collective, whatever failed before it (a test of the ranks' agreement) */
	rc = dreader_restore_shared(d, c, idx < 0 ? 0 : (size_t)idx, ROOT, e, size);
	snprintf(sr->msg[k], sizeof sr->msg[k], "%s", rc ? ckpt_errmsg() : "");
	sr->diff[k] = -1;
	if (!rc) {
		sr->diff[k] = 0;
		for (size_t i = 0; i < n; i++)
			sr->diff[k] += e[i] != scen_e(i);
	}
	ckpt_stats st = {0};
	if (d)
		reader1_stats(dreader_checkpoint(d), &st);
	sr->bytes_read[k] = st.bytes_read;
	dreader_close(d);
	ckpt_store_close(s);
	free(e);
	return rc;
}

static void run(struct shared_run *sr, int *rc)
{
	REQUIRE(tw_run(NR, restore_main, sr, rc) == 0);
}

/* Flips one byte inside emb's first chunk in the packs of dir (stored uncompressed). */
static void damage(const char *dir)
{
	uint16_t want[2048];
	for (size_t i = 0; i < 2048; i++)
		want[i] = scen_e(i);
	char p[4096];
	snprintf(p, sizeof p, "%s/packs", dir);
	DIR *d = opendir(p);
	REQUIRE(d);
	int hits = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (!strstr(e->d_name, ".pack"))
			continue;
		snprintf(p, sizeof p, "%s/packs/%s", dir, e->d_name);
		FILE *f = fopen(p, "r+b");
		REQUIRE(f);
		fseek(f, 0, SEEK_END);
		long len = ftell(f);
		uint8_t *buf = malloc((size_t)len);
		REQUIRE(buf);
		rewind(f);
		REQUIRE(fread(buf, 1, (size_t)len, f) == (size_t)len);
		uint8_t *at = memmem(buf, (size_t)len, want, sizeof want);
		if (at) {
			fseek(f, (long)(at - buf) + 100, SEEK_SET);
			fputc(at[100] ^ 0xff, f);
			hits++;
		}
		fclose(f);
		free(buf);
	}
	closedir(d);
	REQUIRE(hits == 1);
}

int main(void)
{
	char *dir = t_tmpdir("dshared");
	int rc[NR];
	REQUIRE(tw_run(NR, save_main, dir, rc) == 0);
	for (int k = 0; k < NR; k++)
		REQUIRE(rc[k] == 0);
	ckpt_store *s = t_open_store(dir, SCEN_CHUNK, 0);
	CHECK(s && scen_check_layout(s, STEP, NR) == 0); /* the saved checkpoint itself is right */
	ckpt_store_close(s);
	struct shared_run sr = {.dir = dir, .bad_rank = -1};
	run(&sr, rc);
	for (int k = 0; k < NR; k++) {
		CHECK(rc[k] == 0 && sr.diff[k] == 0);
		if (rc[k])
			fprintf(stderr, "rank %d: %s\n", k, sr.msg[k]);
		/* only root read the entry from the store */
		CHECK(k == ROOT ? sr.bytes_read[k] >= (uint64_t)E_ROWS * E_COLS * 2
				: sr.bytes_read[k] == 0);
	}
	printf("bytes read per rank: %llu %llu %llu %llu (emb: %u bytes)\n",
	       (unsigned long long)sr.bytes_read[0], (unsigned long long)sr.bytes_read[1],
	       (unsigned long long)sr.bytes_read[2], (unsigned long long)sr.bytes_read[3],
	       E_ROWS * E_COLS * 2);
	/* a rank with a wrong size: every rank refuses, none waits */
	sr = (struct shared_run){.dir = dir, .bad_rank = 3};
	run(&sr, rc);
	for (int k = 0; k < NR; k++)
		CHECK(rc[k] == -CKPT_E_INVAL && (k == 3 ? strstr(sr.msg[k], "buffer of")
						     : strstr(sr.msg[k], "rank 3 refused")));
	damage(dir);
	sr = (struct shared_run){.dir = dir, .bad_rank = -1};
	run(&sr, rc);
	for (int k = 0; k < NR; k++) {
		if (rc[k] != -CKPT_E_CHECKSUM)
			fprintf(stderr, "rank %d: rc %d: %s\n", k, rc[k], sr.msg[k]);
		CHECK(rc[k] == -CKPT_E_CHECKSUM);
		CHECK(k == ROOT || strstr(sr.msg[k], "rank 1, which reads it for every rank, failed"));
	}
	t_rmrf(dir);
	free(dir);
	return t_done();
}
