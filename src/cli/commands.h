/* commands.h: one entry point per subcommand. Each takes the argv that starts at the
 * command word and returns the process exit code (0, 1 failed run, 2 usage, 130
 * interrupted). */
#ifndef LB_CLI_COMMANDS_H
#define LB_CLI_COMMANDS_H

#include <stdint.h>

int lb_cmd_env(int argc, char **argv);
int lb_cmd_results(int argc, char **argv);
int lb_cmd_serve(int argc, char **argv);
int lb_cmd_rouge(int argc, char **argv);
int lb_cmd_load(int argc, char **argv);
int lb_cmd_infer(int argc, char **argv);
int lb_cmd_tokenize(int argc, char **argv);
int lb_cmd_run(int argc, char **argv);
int lb_cmd_train(int argc, char **argv);
int lb_cmd_selftest(int argc, char **argv);
int lb_cmd_comm(int argc, char **argv);
int lb_cmd_doctor(int argc, char **argv);
int lb_cmd_sweep(int argc, char **argv);
int lb_cmd_compare(int argc, char **argv);
int lb_cmd_history(int argc, char **argv);
int lb_cmd_report(int argc, char **argv);
int lb_cmd_schedule(int argc, char **argv);

/* `llmbench run`'s scaling benchmark on a machine with gpus (>= 2) GPUs: the command line of
 * its `llmbench train --scaling 1,GPUS` child (GPT-2 124M bf16 16 x 1024 at ZeRO 1, its runs
 * tagged `tag`) into argv (NULL-terminated, at least 24 entries), its strings static, tag's
 * or in buf (64 bytes); steps 0: the suite's default. Returns the number of arguments. */
int lb_cli_run_scaling_args(int gpus, int64_t steps, const char *db, const char *tag, char *buf,
                            char **argv);
/* The command line of one `train --scaling` run: the whole command line (argv[-1] to
 * argv[argc - 1], as main passes it) without --scaling and its list, then --json --tag
 * GROUP and, when BASE is not empty (every run after the one-GPU run), --base-tok-per-s
 * BASE; child (room for argc + 6) ends with NULL. Returns the number of entries. */
int lb_cli_train_scaling_child(int argc, char **argv, const char *group, const char *base,
                               char **child);

#endif
