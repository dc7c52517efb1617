/* The runtime half of the CUDA test double: libcudart.so.13 (CUDA 13.0) or libcudart.so.12
 * (CUDA 12.2, which has no cudaStreamGetDevice), selected by CUDADOUBLE_RT. Everything else lives
 * in the driver half (libcuda.so.1, cudadouble.c), which this library needs, as the real runtime
 * needs the driver; dlsym on this library's handle finds those functions through that dependency.
 * A runtime newer than the driver (CUDADOUBLE_DRIVER) finds no device, as the real one does. */
#include <cuda_runtime_api.h>

#include "cudadouble.h"

#define API __attribute__((visibility("default")))

__attribute__((constructor)) static void loaded(void)
{
	cudadouble_runtime_loaded(CUDADOUBLE_RT);
}

API cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = CUDADOUBLE_RT;
	return cudaSuccess;
}

API cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 0;
	if (cudadouble_driver_version() / 1000 < CUDADOUBLE_RT / 1000)
		return cudaErrorInsufficientDriver;
	*n = cudadouble_device_count();
	return *n ? cudaSuccess : cudaErrorNoDevice;
}

#if CUDADOUBLE_RT >= 12080
API cudaError_t cudaStreamGetDevice(cudaStream_t st, int *dev)
{
	*dev = cudadouble_stream_device(st);
	return cudaSuccess;
}
#endif
