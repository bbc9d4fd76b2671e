/* workers.c: `--gpus N` (see workers.h). */
#include "cli/workers.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "comm/launch.h"
#include "gpu/devinfo.h"

bool lb_cli_is_worker(void) {
    return getenv("LLMBENCH_WORKER") != NULL;
}

int lb_cli_run_workers(const char *command, int64_t gpus, char *const *argv, int rank0_stdout,
                       double grace_s) {
    int present = lb_devinfo_cuda_device_count();
    if (present == 0)
        return lb_status_exit_code(lb_args_usage_error(
            command, "--gpus %lld starts one worker per GPU and this machine has no usable GPU",
            (long long)gpus));
    if (gpus > present)
        return lb_status_exit_code(lb_args_usage_error(
            command, "--gpus %lld: this machine has %d usable GPU(s); expected 1 to %d",
            (long long)gpus, present, present));
    const char *env[] = {"LLMBENCH_WORKER=1", NULL};
    lb_launch_params lp = {
        .n = (int)gpus, .argv = argv, .env = env, .rank0_stdout = rank0_stdout, .grace_s = grace_s};
    lb_err err = {{0}};
    int code = lb_launch_local(&lp, &err);
    if (code < 0) fprintf(stderr, "llmbench %s: %s\n", command, err.msg);
    return code < 0 ? 1 : code;
}
