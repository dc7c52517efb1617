/* Race-free store creation: the ranks of a job all call ckpt_store_open(..., CKPT_OPT_CREATE) on
 * the same new path at once. N forked processes are released together (each blocks reading a
 * pipe that the parent then closes); every one must succeed and see the same store (the uuid of
 * the one header on disk), and a save through each handle must be readable through any other.
 * Repeated over fresh paths, with the store directory missing and existing-but-empty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "store/store.h"

#define NPROC 8
#define ROUNDS 6

struct answer {
	int rc;
	uint8_t uuid[16];
	char msg[200];
};

static void child(const char *path, int gate, int out, int idx)
{
	char c;
	(void)!read(gate, &c, 1); /* EOF: every process starts now */
	struct answer a = {0};
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 32 << 20);
	ckpt_store *s = NULL;
	a.rc = ckpt_store_open(path, o, &s);
	if (!a.rc) {
		memcpy(a.uuid, s->hdr.uuid, 16);
		/* A checkpoint from every process: another's header would make its packs foreign. */
		uint64_t v[256];
		for (int i = 0; i < 256; i++)
			v[i] = (uint64_t)idx * 1000 + (uint64_t)i;
		uint64_t shape = 256;
		save1 *sv;
		int rc;
		while ((rc = save1_begin(s, (uint64_t)idx + 1, &sv)) == -CKPT_E_BUSY)
			; /* another process's save holds the lock: try again until it is done */
		if (!rc && !(rc = save1_add_tensor(sv, "v", CKPT_DTYPE_U64, 1, &shape,
						       CKPT_MEM_HOST, v)))
			rc = save1_commit(sv, NULL);
		else if (!rc)
			save1_abort(sv);
		a.rc = rc;
	}
	if (a.rc)
		snprintf(a.msg, sizeof a.msg, "%s", ckpt_errmsg());
	ckpt_store_close(s);
	ckpt_options_free(o);
	(void)!write(out, &a, sizeof a);
	_exit(0);
}

static void one_round(const char *path)
{
	int gate[2], res[2];
	REQUIRE(pipe(gate) == 0 && pipe(res) == 0);
	pid_t pid[NPROC];
	for (int i = 0; i < NPROC; i++) {
		pid[i] = fork();
		REQUIRE(pid[i] >= 0);
		if (pid[i] == 0) {
			close(gate[1]);
			close(res[0]);
			child(path, gate[0], res[1], i);
		}
	}
	close(gate[0]);
	close(res[1]);
	close(gate[1]); /* release them together */
	struct answer a[NPROC];
	int got = 0;
	for (int i = 0; i < NPROC; i++) {
		if (read(res[0], &a[i], sizeof a[i]) != (ssize_t)sizeof a[i])
			break;
		got++;
	}
	for (int i = 0; i < NPROC; i++)
		waitpid(pid[i], NULL, 0);
	close(res[0]);
	CHECK(got == NPROC);
	ckpt_store *s = t_open_store(path, 0, 0);
	REQUIRE(s);
	for (int i = 0; i < got; i++) {
		if (a[i].rc)
			fprintf(stderr, "%s: a creator failed: %s\n", path, a[i].msg);
		CHECK(a[i].rc == 0);
		CHECK(memcmp(a[i].uuid, s->hdr.uuid, 16) == 0);
	}
	/* Every process's checkpoint reads back through one handle. */
	for (int i = 0; i < NPROC; i++) {
		reader1 *r;
		uint64_t v[256];
		CHECK_OK(reader1_open(s, (uint64_t)i + 1, &r));
		if (!r)
			continue;
		CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, v, sizeof v));
		CHECK(v[0] == (uint64_t)i * 1000 && v[255] == (uint64_t)i * 1000 + 255);
		reader1_close(r);
	}
	ckpt_store_close(s);
}

int main(void)
{
	char *dir = t_tmpdir("dist-create");
	for (int k = 0; k < ROUNDS; k++) {
		char p[4096];
		snprintf(p, sizeof p, "%s/s%d", dir, k);
		if (k % 2)
			REQUIRE(mkdir(p, 0755) == 0); /* an empty directory the job was given */
		one_round(p);
	}
	printf("%d rounds of %d processes creating one store at once\n", ROUNDS, NPROC);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
