/* struct_size: how a caller's struct says which version of it the caller was built with. */
#include <string.h>

#include "api/api.h"
#include "common/common.h"

int api_size_ok(size_t struct_size, size_t known, const char *what)
{
	if (struct_size >= known)
		return 0;
	return ckpt_fail(CKPT_E_INVAL,
			 "%s.struct_size is %zu, not sizeof(%s) (%zu): set it before the call",
			 what, struct_size, what, known);
}

void api_copy_out(void *dst, const void *src, size_t n)
{
	size_t want;
	memcpy(&want, dst, sizeof want);
	memcpy(dst, src, want < n ? want : n);
	memcpy(dst, &want, sizeof want);
}
