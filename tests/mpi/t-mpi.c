/* Multi-rank checkpoints over MPI (include/ckpt_mpi.h), run by tests/mpi/t-mpi.sh under
 * mpirun -np 4. Usage: t-mpi STORE MODE STEP [KILLED VICTIM DELAY], MODE one of
 *   save   every rank saves its part of STEP (tests/unit/t-dist-scen.h), then every rank checks
 *          STEP restored as 1 to 4 ranks by rows and columns;
 *   check  every rank checks STEP as this world's size would restore it (its own box only);
 *   round  one kill round (t-mpi.sh): checks the step the previous round's kill hit (STEP - 1;
 *          if it is visible it must be whole: verified by rank 0, every rank's boxes exact),
 *          saves STEP (must succeed: the store accepts the next save after a kill), then saves
 *          KILLED while rank VICTIM is SIGKILLed DELAY ms into its save, or at its kill point
 *          T_MPI_KILL_AT (RANK:N, as CKPT_DIST_KILL_AT) when DELAY < 0; a victim whose save
 *          returns first kills itself then. VICTIM -1: no kill.
 * CKPT_DIST_KILL_AT (test library) kills a rank at a point of its save. Exit 0 when every check
 * passed. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_mpi.h"
#include "t-dist-scen.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static atomic_int save_returned;
static double kill_delay;

/* The victim's killer: wherever the delay lands in the save (the checks hold at any point). */
static void *killer(void *arg)
{
	(void)arg;
	struct timespec d = {(time_t)kill_delay, (long)((kill_delay - (double)(time_t)kill_delay) * 1e9)};
	nanosleep(&d, NULL);
	if (!atomic_exchange(&save_returned, 1)) {
		static const char m[] = "KILL-IN-SAVE\n";
		(void)!write(2, m, sizeof m - 1);
		raise(SIGKILL);
	}
	return NULL;
}

/* Checks a checkpoint of step that may exist: when visible, whole (rank 0 verifies every chunk
 * and part, every rank restores its rows and its columns byte-exact). Returns the mismatches. */
static long check_visible(ckpt_store *s, const ckpt_comm *c, uint64_t step, int *visible)
{
	uint64_t got;
	*visible = ckpt_store_resolve(s, step, &got) == 0;
	if (!*visible)
		return 0;
	long bad = 0;
	if (c->rank == 0) {
		/* The verify of a multi-rank checkpoint checks its part files, then every chunk. */
		ckpt_reader *r = NULL;
		if (ckpt_reader_open(s, step, 0, &r) || ckpt_reader_verify(r, NULL, NULL, NULL, NULL))
			bad++;
		ckpt_reader_close(r);
	}
	return bad + (scen_check_rank(s, step, (unsigned)c->rank, (unsigned)c->size) != 0);
}

/* Step 2 (saved before the kills) restores byte-exact: this rank's rows. Every chunk of every
 * checkpoint is verified once at the end (t-mpi.sh: ckptctl verify --all). */
static long check_earlier(ckpt_store *s, const ckpt_comm *c)
{
	unsigned q = (unsigned)c->rank, n = (unsigned)c->size;
	uint64_t ro[2] = {W_ROWS * q / n, 0}, rl[2] = {W_ROWS * (q + 1) / n - ro[0], W_COLS};
	return scen_check_box(s, 2, ro, rl) != 0;
}

static long kill_round(ckpt_store *s, const ckpt_comm *c, uint64_t step, char **argv)
{
	int visible;
	long bad = check_earlier(s, c);
	bad += check_visible(s, c, step - 1, &visible);
	if (c->rank == 0)
		printf("previous kill: step %llu %s\n", (unsigned long long)(step - 1),
		       visible ? "committed (whole)" : "not visible");
	ckpt_stats st = {.struct_size = sizeof st};
	double t0 = now();
	if (scen_save(s, c, step, &st)) {
		fprintf(stderr, "rank %d: save %llu after a kill: %s\n", c->rank,
			(unsigned long long)step, ckpt_errmsg());
		return bad + 1;
	}
	if (c->rank == 0)
		printf("rank 0 saved in %.1f ms\n", (now() - t0) * 1e3);
	int victim = atoi(argv[5]);
	double delay_ms = atof(argv[6]);
	if (victim < 0)
		return bad;
	int any = 0, mine = bad != 0;
	MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any)
		return bad + 1; /* report it rather than hide it behind the kill */
	if (c->rank == 0)
		printf("saved step %llu: ok\n", (unsigned long long)step);
	fflush(stdout);
	pthread_t th;
	if (c->rank == victim && delay_ms >= 0) {
		kill_delay = delay_ms * 1e-3;
		pthread_create(&th, NULL, killer, NULL);
	}
	/* Set only now: the kill points count from here, not through the save of step. */
	const char *at = getenv("T_MPI_KILL_AT");
	if (c->rank == victim && delay_ms < 0 && at)
		setenv("CKPT_DIST_KILL_AT", at, 1);
	double t1 = now();
	scen_save(s, c, strtoull(argv[4], NULL, 10), &st);
	if (c->rank == victim)
		fprintf(stderr, "victim's save returned after %.3f ms\n", (now() - t1) * 1e3);
	if (c->rank == victim && !atomic_exchange(&save_returned, 1)) {
		static const char m[] = "KILL-AFTER-SAVE\n";
		(void)!write(2, m, sizeof m - 1);
		raise(SIGKILL);
	}
	/* The others wait here until mpirun, seeing the victim die, ends the job. */
	MPI_Barrier(MPI_COMM_WORLD);
	return bad;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	if (argc != 4 && !(argc == 7 && !strcmp(argv[2], "round"))) {
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
	/* Every rank creates the store when it is missing, at once: one header wins
	 * (tests/unit/t-dist-create checks the race itself). */
	int rc = ckpt_store_open(argv[1], o, &s);
	ckpt_options_free(o);
	long bad = 0;
	if (rc) {
		fprintf(stderr, "rank %d: open %s: %s\n", cm.comm.rank, argv[1], ckpt_errmsg());
		bad = 1;
	} else if (!strcmp(argv[2], "save")) {
		ckpt_stats st = {.struct_size = sizeof st};
		if ((rc = scen_save(s, &cm.comm, step, &st))) {
			fprintf(stderr, "rank %d: save %s: %s\n", cm.comm.rank, argv[3], ckpt_errmsg());
			bad = 1;
		} else {
			printf("rank %d step %s: %llu of %llu chunks new\n", cm.comm.rank, argv[3],
			       (unsigned long long)st.chunks_new, (unsigned long long)st.chunks);
			for (unsigned n = 1; n <= 4 && !bad; n++)
				bad = scen_check_layout(s, step, n) != 0;
		}
	} else if (!strcmp(argv[2], "round")) {
		bad = kill_round(s, &cm.comm, step, argv);
	} else {
		/* This rank's rows and its columns of a world of this size. */
		bad = scen_check_rank(s, step, (unsigned)cm.comm.rank, (unsigned)cm.comm.size) != 0;
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
