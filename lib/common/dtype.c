/* The dtype table: element sizes and safetensors names. */
#include "common/common.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[] = {
	[CKPT_DTYPE_BOOL] = {"BOOL", 1},    [CKPT_DTYPE_U8] = {"U8", 1},
	[CKPT_DTYPE_I8] = {"I8", 1},        [CKPT_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
	[CKPT_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [CKPT_DTYPE_I16] = {"I16", 2},
	[CKPT_DTYPE_U16] = {"U16", 2},      [CKPT_DTYPE_F16] = {"F16", 2},
	[CKPT_DTYPE_BF16] = {"BF16", 2},    [CKPT_DTYPE_I32] = {"I32", 4},
	[CKPT_DTYPE_U32] = {"U32", 4},      [CKPT_DTYPE_F32] = {"F32", 4},
	[CKPT_DTYPE_F64] = {"F64", 8},      [CKPT_DTYPE_I64] = {"I64", 8},
	[CKPT_DTYPE_U64] = {"U64", 8},
};

CKPT_API size_t ckpt_dtype_size(ckpt_dtype dtype)
{
	if ((unsigned)dtype >= ARRAY_SIZE(dtypes))
		return 0;
	return dtypes[dtype].size;
}

CKPT_API const char *ckpt_dtype_name(ckpt_dtype dtype)
{
	if ((unsigned)dtype >= ARRAY_SIZE(dtypes))
		return NULL;
	return dtypes[dtype].name;
}

CKPT_API ckpt_dtype ckpt_dtype_from_name(const char *name)
{
	if (!name)
		return 0;
	for (unsigned i = 1; i < ARRAY_SIZE(dtypes); i++)
		if (dtypes[i].name && !strcmp(dtypes[i].name, name))
			return (ckpt_dtype)i;
	return 0;
}
