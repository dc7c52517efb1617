# Sourced by the MPI tests (tests/mpi/t-*.sh, POSIX sh): skips (exit 77) without Open MPI, sets
# the environment for mpirun on one machine, and mpi_build SRC OUT compiles a test program with
# mpicc against the test library (CKPT_DIST_KILL_AT and the other test hooks). -Ilib: the
# scenario the programs share with the unit tests (tests/unit/t-dist-scen.h) includes the
# library's internal header, as the unit tests' helpers do.
# Debian: openmpi-bin libopenmpi-dev (tools/deps.d/mpi.test).
B=${B:-build}
command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
	{ echo "skip: mpicc or mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
tlib=$B/tests/lib/libckpt-internal.a
[ -f "$tlib" ] || { echo "FAIL: $tlib not built (make tests)"; exit 1; }
# One machine, no network, maybe root in a container: shared memory only, no ssh, no CMA.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_hwloc_base_binding_policy=none
# Launch time. mpirun's hwloc loads its GL plugin, which probes X displays :0 to :59, each a host
# name lookup and a TCP connect (strace: connect() to 127.0.0.1:6000..6059). Where /etc/hosts
# does not resolve the names (a fresh Debian chroot: no /etc/hosts), each lookup waits for DNS:
# 10.8 s per launch against 0.6 s with the plugin off (measured with an empty /etc/hosts bound
# over the real one in a mount namespace); that was t-mpi's 355 s. The other plugins (OpenCL,
# PCI) and the network transports we cannot use (OFI, UCX, hcoll) are skipped too: 0.79 s ->
# 0.44 s per launch here.
export HWLOC_COMPONENTS=-gl,-opencl,-pci
export OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi OMPI_MCA_coll=^hcoll OMPI_MCA_osc=^ucx,rdma
# Open MPI's session directory and its shared memory segments (/tmp/ompi.*, /dev/shm/vader_*),
# which a killed job leaves behind, go into DIR (the test's temporary directory, removed at exit).
mpi_tmpdir() { # DIR
	export OMPI_MCA_orte_tmpdir_base="$1" OMPI_MCA_btl_vader_backing_directory="$1"
}
mpi_build() { # SRC OUT
	mpicc -std=gnu11 -D_GNU_SOURCE -O1 -Iinclude -Ilib -Itests/unit "$1" "$tlib" \
		$(pkg-config --libs liburing libzstd libxxhash libcurl) -lpthread -ldl -o "$2" ||
		{ echo "FAIL: mpicc $1"; exit 1; }
}
