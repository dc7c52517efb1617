/* One job of the multi-rank kill test (tests/mpi/t-mpi-kill.sh), under mpirun -np N:
 *
 *   t-mpi-kill STORE REPORT FIRST COUNT [CHECK...]
 *
 * Every rank saves its part of steps FIRST .. FIRST+COUNT-1 in turn (tests/unit/t-dist-scen.h:
 * the data of a step depends on the step only, not on the world's size), then restores every
 * CHECK step by its rows and by its columns of this world and compares every byte. Rank 0
 * appends to REPORT, one write(2) a line, so that a line is there once written whoever dies
 * after (mpirun included, which forwards stdout):
 *   pid R PID PPID SID  every rank, before the first save (the kill's targets: the rank, its
 *                     parent mpirun, the job's session);
 *   ready N           all N ranks are up, the saves begin;
 *   begin S           rank 0 is about to begin step S;
 *   committed S       ckpt_save_commit returned 0 on rank 0;
 *   failed S MSG      the save of S failed on rank 0 (the job then stops, exit 1);
 *   restored S ok     every rank restored CHECK step S exactly (or "restored S FAILED");
 *   done              every save committed and every check passed.
 * The test SIGKILLs a rank or mpirun at a random time of the saves; COUNT is large enough that
 * the loop is still saving then. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ckpt_mpi.h"
#include "t-dist-scen.h"

static int report_fd = -1;

/* One line, one write: O_APPEND keeps the lines of all ranks whole and in order of writing. */
static void report(const char *fmt, ...)
{
	char line[600];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	if (write(report_fd, line, (size_t)n) != n)
		perror("t-mpi-kill: report");
}

/* Saves first .. first+count-1. Returns 0 when every one committed. */
static int save_loop(ckpt_store *s, const ckpt_comm *c, uint64_t first, uint64_t count)
{
	for (uint64_t step = first; step < first + count; step++) {
		ckpt_stats st = {.struct_size = sizeof st};
		if (c->rank == 0)
			report("begin %llu", (unsigned long long)step);
		int rc = scen_save(s, c, step, &st);
		if (rc) {
			if (c->rank == 0)
				report("failed %llu %s", (unsigned long long)step, ckpt_errmsg());
			fprintf(stderr, "rank %d: save %llu: %s\n", c->rank, (unsigned long long)step,
				ckpt_errmsg());
			return 1;
		}
		if (c->rank == 0)
			report("committed %llu", (unsigned long long)step);
	}
	return 0;
}

/* Restores this rank's rows and columns of step; every rank's result is gathered on rank 0. */
static int check_step(ckpt_store *s, const ckpt_comm *c, uint64_t step)
{
	int mine = scen_check_rank(s, step, (unsigned)c->rank, (unsigned)c->size) != 0;
	int any = 0;
	MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (mine)
		fprintf(stderr, "rank %d: step %llu does not restore exactly\n", c->rank,
			(unsigned long long)step);
	if (c->rank == 0)
		report("restored %llu %s", (unsigned long long)step, any ? "FAILED" : "ok");
	return any;
}

static int run(ckpt_store *s, const ckpt_comm *c, int argc, char **argv)
{
	report("pid %d %ld %ld %ld", c->rank, (long)getpid(), (long)getppid(), (long)getsid(0));
	MPI_Barrier(MPI_COMM_WORLD);
	if (c->rank == 0)
		report("ready %d", c->size);
	int bad = save_loop(s, c, strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
	int any = 0;
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	for (int i = 5; i < argc && !any; i++)
		bad |= check_step(s, c, strtoull(argv[i], NULL, 10));
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (c->rank == 0 && !any)
		report("done");
	return any;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	ckpt_mpi_comm cm;
	if (argc < 5 || ckpt_mpi_comm_init(&cm, MPI_COMM_WORLD)) {
		fprintf(stderr, argc < 5 ? "usage: t-mpi-kill STORE REPORT FIRST COUNT [CHECK...]\n"
					 : "t-mpi-kill: %s\n", cm.msg);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	report_fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, SCEN_CHUNK);
	ckpt_store *s = NULL;
	int bad = report_fd < 0 || ckpt_store_open(argv[1], o, &s) != 0;
	ckpt_options_free(o);
	if (bad)
		fprintf(stderr, "rank %d: open %s or %s: %s\n", cm.comm.rank, argv[1], argv[2],
			ckpt_errmsg());
	int any = 0;
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (!any)
		any = run(s, &cm.comm, argc, argv);
	ckpt_store_close(s);
	ckpt_mpi_comm_free(&cm);
	MPI_Finalize();
	return any;
}
