/* A save killed with SIGKILL at random moments never damages an earlier checkpoint, never leaves
 * a visible half-written one, and leaves a store that verifies and accepts the next save.
 * Iterations: CKPT_CRASH_ITERS (default 50). */
#include "helpers.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { NT = 6, TB = (512 << 10) + 12345, CHUNK = 64 << 10 };

static void tensor_data(uint8_t *buf, uint64_t step, int i)
{
	/* Even tensors never change (dedup across steps); odd ones change with the step. */
	t_fill(buf, TB, i % 2 ? step * 1000 + (uint64_t)i : (uint64_t)i);
}

static void child(const char *dir, uint64_t first)
{
	ckpt_store *s = t_open_store(dir, CHUNK, (first / 100) % 2);
	uint8_t *buf[NT];
	for (int i = 0; i < NT; i++)
		buf[i] = malloc(TB);
	uint64_t shape[1] = {TB};
	for (uint64_t step = first;; step++) {
		for (int i = 0; i < NT; i++)
			tensor_data(buf[i], step, i);
		save1 *sv;
		if (save1_begin(s, step, &sv))
			_exit(3);
		for (int i = 0; i < NT; i++) {
			char nm[16];
			snprintf(nm, sizeof nm, "t%d", i);
			save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf[i]);
		}
		if (save1_commit(sv, NULL))
			_exit(4);
	}
}

/* Every listed checkpoint is valid, verifies, and holds the data of its step. */
static int check_store(const char *dir, uint64_t *seen, int nseen, int full)
{
	ckpt_store *s = t_open_store(dir, 0, 0);
	ckpt_info *list;
	int n = ckpt_store_list(s, 1, &list);
	REQUIRE(n >= 0);
	uint8_t *want = malloc(TB), *got = malloc(TB);
	int bad = 0;
	for (int k = 0; k < n; k++) {
		if (list[k].error) {
			fprintf(stderr, "step %llu: invalid manifest visible after kill (%s)\n",
				(unsigned long long)list[k].step, ckpt_strerror(list[k].error));
			bad++;
			continue;
		}
		/* Checkpoints checked in an earlier iteration are re-read in full every 10th. */
		int old = 0;
		for (int j = 0; j < nseen; j++)
			old |= seen[j] == list[k].step;
		if (old && !full)
			continue;
		reader1 *r;
		if (reader1_open(s, list[k].step, &r)) {
			fprintf(stderr, "step %llu: open failed: %s\n", (unsigned long long)list[k].step,
				ckpt_errmsg());
			bad++;
			continue;
		}
		if (reader1_verify(r, NULL, NULL, NULL) != 0) {
			fprintf(stderr, "step %llu: verify failed\n", (unsigned long long)list[k].step);
			bad++;
		}
		for (int i = 0; i < NT; i++) {
			tensor_data(want, list[k].step, i);
			if (reader1_restore(r, (size_t)i, CKPT_MEM_HOST, got, TB) || memcmp(got, want, TB)) {
				fprintf(stderr, "step %llu tensor %d: wrong data\n",
					(unsigned long long)list[k].step, i);
				bad++;
			}
		}
		reader1_close(r);
	}
	/* Checkpoints seen before must all still be there. */
	for (int j = 0; j < nseen; j++) {
		int found = 0;
		for (int k = 0; k < n; k++)
			found |= list[k].step == seen[j] && !list[k].error;
		if (!found) {
			fprintf(stderr, "step %llu vanished\n", (unsigned long long)seen[j]);
			bad++;
		}
	}
	ckpt_info_free(list);
	free(want);
	free(got);
	ckpt_store_close(s);
	return bad;
}

int main(void)
{
	const char *e = getenv("CKPT_CRASH_ITERS");
	int iters = e ? atoi(e) : 50;
	char *dir = t_tmpdir("crash");
	ckpt_store_close(t_open_store(dir, CHUNK, 0));
	uint64_t seed = (uint64_t)time(NULL);
	printf("seed %llu\n", (unsigned long long)seed);
	uint64_t *seen = calloc(100000, sizeof *seen);
	int nseen = 0, kills_mid = 0;
	for (int it = 0; it < iters; it++) {
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			child(dir, (uint64_t)it * 100);
		/* Kill somewhere in the first few saves: 0 to 150 ms (start-up takes some of it). */
		usleep((useconds_t)(t_rand(&seed) % 150000));
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		if (WIFEXITED(status)) {
			fprintf(stderr, "iteration %d: child exited %d before the kill\n", it,
				WEXITSTATUS(status));
			t_failures++;
		}
		int bad = check_store(dir, seen, nseen, it % 10 == 9 || it == iters - 1);
		if (bad) {
			fprintf(stderr, "iteration %d: %d problem(s)\n", it, bad);
			t_failures++;
			break;
		}
		/* Record what exists now; it must survive every later kill. */
		ckpt_store *s = t_open_store(dir, 0, 0);
		ckpt_info *list;
		int n = ckpt_store_list(s, 0, &list);
		for (int k = 0; k < n; k++) {
			int dup = 0;
			for (int j = 0; j < nseen; j++)
				dup |= seen[j] == list[k].step;
			if (!dup && nseen < 100000)
				seen[nseen++] = list[k].step;
			kills_mid += list[k].step == (uint64_t)it * 100;
		}
		ckpt_info_free(list);
		ckpt_store_close(s);
	}
	printf("%d iterations, %d checkpoints survived and verified, %d iterations committed at "
	       "least one save\n", iters, nseen, kills_mid);
	/* The kills must not all land before the first commit, or the test proves nothing. */
	CHECK(kills_mid > 0);
	CHECK(nseen > 0);
	t_rmrf(dir);
	free(dir);
	free(seen);
	return t_done();
}
