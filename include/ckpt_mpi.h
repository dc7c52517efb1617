/* ckpt_mpi.h: a ckpt_comm over an MPI communicator, header-only, so that libckpt.so links no
 * MPI: the program that includes this header links its MPI (mpicc).
 *
 *	ckpt_mpi_comm cm;
 *	ckpt_mpi_comm_init(&cm, MPI_COMM_WORLD);        // duplicates it, errors returned
 *	ckpt_save_options o = {.struct_size = sizeof o, .comm = &cm.comm};
 *	ckpt_save_begin(store, step, &o, &save);        // a multi-rank save
 *	...
 *	ckpt_mpi_comm_free(&cm);                        // after every save using it is freed
 *
 * The same &cm.comm in a ckpt_region's comm makes ckpt_reader_read() a collective read.
 *
 * Failures: the duplicate communicator returns errors (MPI_ERRORS_RETURN) instead of aborting, so
 * a collective that MPI reports failed returns -CKPT_E_IO with MPI's message. Whether a dead rank
 * makes the others' collectives fail (rather than wait) is up to the MPI implementation: Open MPI
 * aborts the job when a process dies (so no rank waits forever); MPI implementations with ULFM
 * report MPI_ERR_PROC_FAILED, which this adapter passes on. */
#ifndef CKPT_MPI_H
#define CKPT_MPI_H

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"

typedef struct ckpt_mpi_comm {
	ckpt_comm comm;  /* &comm goes in ckpt_save_options.comm (or ckpt_region.comm) */
	MPI_Comm mpi;
	char msg[MPI_MAX_ERROR_STRING + 64];
} ckpt_mpi_comm;

static inline int ckpt_mpi_fail_(ckpt_mpi_comm *c, int err, const char *what)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(err, s, &len) != MPI_SUCCESS)
		snprintf(s, sizeof s, "MPI error %d", err);
	snprintf(c->msg, sizeof c->msg, "%s on rank %d: %s", what, c->comm.rank, s);
	return -CKPT_E_IO;
}

static inline int ckpt_mpi_allgather_(void *ctx, const void *in, size_t len, void *out)
{
	ckpt_mpi_comm *c = (ckpt_mpi_comm *)ctx;
	if (len > 0x7fffffff)
		return -CKPT_E_INVAL;
	int e = MPI_Allgather(in, (int)len, MPI_BYTE, out, (int)len, MPI_BYTE, c->mpi);
	return e == MPI_SUCCESS ? 0 : ckpt_mpi_fail_(c, e, "MPI_Allgather");
}

static inline int ckpt_mpi_broadcast_(void *ctx, void *buf, size_t len, int root)
{
	ckpt_mpi_comm *c = (ckpt_mpi_comm *)ctx;
	if (len > 0x7fffffff)
		return -CKPT_E_INVAL;
	int e = MPI_Bcast(buf, (int)len, MPI_BYTE, root, c->mpi);
	return e == MPI_SUCCESS ? 0 : ckpt_mpi_fail_(c, e, "MPI_Bcast");
}

static inline int ckpt_mpi_barrier_(void *ctx)
{
	ckpt_mpi_comm *c = (ckpt_mpi_comm *)ctx;
	int e = MPI_Barrier(c->mpi);
	return e == MPI_SUCCESS ? 0 : ckpt_mpi_fail_(c, e, "MPI_Barrier");
}

static inline const char *ckpt_mpi_errmsg_(void *ctx)
{
	return ((ckpt_mpi_comm *)ctx)->msg;
}

/* Fills c from comm (duplicated, with errors returned), c->comm.struct_size included. Returns 0
 * or -CKPT_E_IO. */
static inline int ckpt_mpi_comm_init(ckpt_mpi_comm *c, MPI_Comm comm)
{
	/* Zeroed first, so that ckpt_comm fields this function does not fill read as unset, not
	 * as whatever the caller's memory held. */
	memset(&c->comm, 0, sizeof c->comm);
	c->comm.struct_size = sizeof(ckpt_comm);
	c->msg[0] = 0;
	c->comm.ctx = c;
	int e = MPI_Comm_dup(comm, &c->mpi);
	if (e != MPI_SUCCESS)
		return ckpt_mpi_fail_(c, e, "MPI_Comm_dup");
	MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
	MPI_Comm_rank(c->mpi, &c->comm.rank);
	MPI_Comm_size(c->mpi, &c->comm.size);
	c->comm.allgather = ckpt_mpi_allgather_;
	c->comm.broadcast = ckpt_mpi_broadcast_;
	c->comm.barrier = ckpt_mpi_barrier_;
	c->comm.errmsg = ckpt_mpi_errmsg_;
	return 0;
}

static inline void ckpt_mpi_comm_free(ckpt_mpi_comm *c)
{
	MPI_Comm_free(&c->mpi);
}

#endif
