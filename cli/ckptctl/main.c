/* ckptctl: inspect and move libckpt checkpoint stores. The command table; each command lives in
 * its own file with its options. */
#include "ckptctl.h"

static const struct cli_cmd *const commands[] = {
	&ck_cmd_import, &ck_cmd_export, &ck_cmd_list, &ck_cmd_verify, &ck_cmd_show,
	&ck_cmd_diff,   &ck_cmd_du,     &ck_cmd_prune, &ck_cmd_delete, &ck_cmd_gc,
	&ck_cmd_push,   &ck_cmd_pull,
	NULL,
};

int main(int argc, char **argv)
{
	cli_prog = "ckptctl";
	return cli_dispatch("Manage libckpt checkpoint stores.", commands, argc, argv);
}
