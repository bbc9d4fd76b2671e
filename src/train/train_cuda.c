/* train_cuda.c: the CUDA path's entry point. A build without CUDA refuses here; the GPU
 * engine replaces the CUDA half when it lands (until then it refuses too, honestly). */
#include "train/train_cuda.h"

lb_status lb_train_cuda_run(const lb_train_params *p, const lb_model_config *cfg,
                            lb_data_loader *data, lb_result *r, lb_err *err) {
#ifdef LB_HAVE_CUDA
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "the CUDA training engine is not in this build yet; use --device cpu");
#else
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "--device cuda was asked but this llmbench was built without CUDA");
#endif
}
