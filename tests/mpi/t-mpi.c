/* Multi-rank checkpoints over MPI (include/ckpt_mpi.h), run by tests/mpi/t-mpi.sh under
 * mpirun -np 4. Usage: t-mpi STORE MODE STEP, MODE one of
 *   save   every rank saves its part of STEP (tests/unit/t-dist-scen.h), then every rank checks
 *          STEP restored as 1 to 4 ranks by rows and columns;
 *   check  every rank checks STEP as this world's size would restore it (its own box only).
 * CKPT_DIST_KILL_AT (test library) kills a rank at a point of its save. Exit 0 when every check
 * passed. */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt_mpi.h"
#include "t-dist-scen.h"

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	if (argc != 4) {
		fprintf(stderr, "usage: t-mpi STORE save|check STEP\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	ckpt_mpi_comm cm;
	if (ckpt_mpi_comm_init(&cm, MPI_COMM_WORLD)) {
		fprintf(stderr, "%s\n", cm.msg);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	uint64_t step = strtoull(argv[3], NULL, 10);
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, SCEN_CHUNK);
	ckpt_store *s = NULL;
	/* Rank 0 creates the store, the others open it after: creation is not safe to race
	 * (two creators would write two store headers). */
	int rc = cm.comm.rank == 0 ? ckpt_store_open(argv[1], o, &s) : 0;
	MPI_Barrier(MPI_COMM_WORLD);
	if (cm.comm.rank != 0) {
		ckpt_options_set(o, CKPT_OPT_CREATE, 0);
		rc = ckpt_store_open(argv[1], o, &s);
	}
	ckpt_options_free(o);
	long bad = 0;
	if (rc) {
		fprintf(stderr, "rank %d: open %s: %s\n", cm.comm.rank, argv[1], ckpt_errmsg());
		bad = 1;
	} else if (!strcmp(argv[2], "save")) {
		ckpt_stats st;
		if ((rc = scen_save(s, &cm.comm, step, &st))) {
			fprintf(stderr, "rank %d: save %s: %s\n", cm.comm.rank, argv[3], ckpt_errmsg());
			bad = 1;
		} else {
			printf("rank %d step %s: %llu of %llu chunks new\n", cm.comm.rank, argv[3],
			       (unsigned long long)st.chunks_new, (unsigned long long)st.chunks);
			for (unsigned n = 1; n <= 4 && !bad; n++)
				bad = scen_check_layout(s, step, n) != 0;
		}
	} else {
		/* This rank's rows and its columns of a world of this size. */
		unsigned q = (unsigned)cm.comm.rank, n = (unsigned)cm.comm.size;
		uint64_t ro[2] = {W_ROWS * q / n, 0}, rl[2] = {W_ROWS * (q + 1) / n - ro[0], W_COLS};
		uint64_t co[2] = {0, W_COLS * q / n}, cl[2] = {W_ROWS, W_COLS * (q + 1) / n - co[1]};
		bad = scen_check_box(s, step, ro, rl) != 0 || scen_check_box(s, step, co, cl) != 0;
	}
	ckpt_store_close(s);
	int any = 0, mine = bad != 0;
	MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (mine)
		fprintf(stderr, "rank %d: FAILED\n", cm.comm.rank);
	ckpt_mpi_comm_free(&cm);
	MPI_Finalize();
	return any;
}
