/* ckptctl: inspect and move libckpt checkpoint stores. The command table; each command lives in
 * its own file. */
#include "ckptctl.h"

static const struct cli_cmd commands[] = {
	{"import", cmd_import, "make a checkpoint from a safetensors file", usage_import},
	{"export", cmd_export, "write a checkpoint as a safetensors file", usage_export},
	{"list", cmd_list, "list the checkpoints of a store", usage_list},
	{"verify", cmd_verify, "re-read and re-hash every chunk of checkpoints", usage_verify},
	{"show", cmd_show, "show one checkpoint's metadata and tensors", usage_show},
	{"diff", cmd_diff, "compare two checkpoints: tensors added, removed, changed", usage_diff},
	{"du", cmd_du, "space per checkpoint, shared and exclusive, and garbage", usage_du},
	{"prune", cmd_prune, "remove checkpoints by a retention policy", usage_prune},
	{"delete", cmd_delete, "remove the checkpoints of given steps", usage_delete},
	{"gc", cmd_gc, "remove unreferenced packs and leftovers; compact packs", usage_gc},
	{NULL, NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
	cli_prog = "ckptctl";
	return cli_dispatch("Manage libckpt checkpoint stores.", commands, argc, argv);
}
