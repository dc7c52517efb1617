/* The node-loss drill of a 4-rank checkpoint under Open MPI, run by
 * tests/mpi/t-mpi-remote.sh:
 *   t-mpi-remote STORE save STEP URL   every rank saves its shards (t-dist-scen.h); every rank's
 *                                      handle uploads its own packs in the background, rank 0
 *                                      the manifest last; each waits until the checkpoint is on
 *                                      the remote and prints the packs its handle put
 *                                      ("rank R put N packs"). With CKPT_TEST_SHARE_STALL=R
 *                                      (test builds) rank R's share never comes, as if it died
 *                                      after the commit: rank R does not wait, rank 0 sends its
 *                                      share after CKPT_REMOTE_SHARE_WAIT_S
 *   t-mpi-remote STORE check STEP URL  every rank restores its rows and its columns of the
 *                                      global tensors, from the local store or, where the
 *                                      checkpoint or a pack is not local, from the remote */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_mpi.h"
#include "t-dist-scen.h"

/* The upload counters of a handle (lib/tier, test builds link the internal library). */
void tier_upload_stats(struct ckpt_store *s, ckpt_remote_stats *st);

/* Whether this rank plays the one whose share never reaches the remote. */
static bool stalled(int rank)
{
	const char *e = getenv("CKPT_TEST_SHARE_STALL");
	return e && *e && atoi(e) == rank && !strchr(e, ':');
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	if (argc != 5) {
		fprintf(stderr, "usage: t-mpi-remote STORE save|check STEP URL\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	ckpt_mpi_comm cm;
	if (ckpt_mpi_comm_init(&cm, MPI_COMM_WORLD)) {
		fprintf(stderr, "%s\n", cm.msg);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	uint64_t step = strtoull(argv[3], NULL, 10);
	bool save = !strcmp(argv[2], "save");
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, save);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, SCEN_CHUNK);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(argv[1], o, &s);
	ckpt_options_free(o);
	MPI_Barrier(MPI_COMM_WORLD); /* rank 0's uploads see the store every rank opened */
	unsigned flags = save ? CKPT_REMOTE_UPLOAD : 0;
	ckpt_remote *rm = NULL;
	if (!rc)
		rc = ckpt_remote_open(s, argv[4], flags, &rm);
	long bad = rc != 0;
	if (rc) {
		fprintf(stderr, "rank %d: open %s with %s: %s\n", cm.comm.rank, argv[1], argv[4],
			ckpt_errmsg());
	} else if (save) {
		ckpt_stats st = {.struct_size = sizeof st};
		if ((rc = scen_save(s, &cm.comm, step, &st)) ||
		    (!stalled(cm.comm.rank) && (rc = ckpt_remote_wait(rm, step, 60000)))) {
			fprintf(stderr, "rank %d: save %s: %s\n", cm.comm.rank, argv[3], ckpt_errmsg());
			bad = 1;
		} else if (!stalled(cm.comm.rank)) {
			int state = ckpt_remote_state(rm, step);
			ckpt_remote_stats up = {.struct_size = sizeof up};
			tier_upload_stats(s, &up);
			printf("step %s: rank %d put %llu packs (%s)\n", argv[3], cm.comm.rank,
			       (unsigned long long)up.packs_sent,
			       state == CKPT_UPLOAD_REMOTE ? "remote" : "?");
			bad = state != CKPT_UPLOAD_REMOTE;
		}
	} else {
		bad = scen_check_rank(s, step, (unsigned)cm.comm.rank, (unsigned)cm.comm.size) != 0;
	}
	if (save) /* a stalled rank closes (canceling its share) once the others are done */
		MPI_Barrier(MPI_COMM_WORLD);
	ckpt_store_close(s);
	int any = 0, mine = bad != 0;
	MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (mine)
		fprintf(stderr, "rank %d: FAILED\n", cm.comm.rank);
	ckpt_mpi_comm_free(&cm);
	MPI_Finalize();
	return any;
}
