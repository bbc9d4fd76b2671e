/* model_gpu_graph.c: a training step of the GPU transformer as one CUDA graph
 * (lb_model_gpu_train_step, model/model_gpu.h).
 *
 * The first step runs kernel by kernel: it prepares and times every product and makes the
 * timed choices (model_gpu_tune.c), all of which wait on the device. The second step is
 * captured as a graph (gradient clears, forward, backward, optimizer; the batch upload and
 * the copy of the mean loss into its slot stay outside) and every later step launches it,
 * recaptured when the optimizer settings change. Before instantiation the libraries' small
 * workspace memsets become kernel nodes (gpu/graph.cuh's capture). A capture the driver
 * refuses is not an error: that step and all later ones run kernel by kernel, with the same
 * results. */
#ifdef LB_HAVE_CUDA

#include "core/log.h"
#include "gpu/check.h"
#include "gpu/graph.cuh"
#include "model/model_gpu_impl.h"

typedef struct {
    lb_model_gpu *m;
    float *loss;
    const lb_gpu_adamw_params *p;
} step_body;

static lb_status enqueue_step(void *ctx, cudaStream_t s, lb_err *err) {
    const step_body *b = ctx;
    (void)s; /* the model's stream */
    return lb_model_gpu_step(b->m, b->loss, b->p, err);
}

/* Records a whole step (lb_model_gpu_step) into step_graph. A step that cannot be captured (an
 * operation that stream capture does not allow) is not an error: nothing of it ran, the caller runs
 * it kernel by kernel, and so do all later steps. */
static void capture(lb_model_gpu *m, float *loss, const lb_gpu_adamw_params *p) {
    step_body b = {m, loss, p};
    char why[LB_ERR_MSG_BYTES];
    if (lb_gpu_graph_capture(m->stream, enqueue_step, &b, NULL, &m->step_graph, why, sizeof why)) {
        m->graph_ap = *p;
        return;
    }
    m->graph_failed = true;
    LB_INFO("training steps run kernel by kernel: capturing one as a CUDA graph failed (%s)", why);
}

lb_status lb_model_gpu_train_step(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                                  int slot, const lb_gpu_adamw_params *p, lb_err *err) {
    LB_TRY(lb_model_gpu_upload(m, inputs, targets, slot, err));
    float *loss = m->loss_slots + n_slots(m); /* lb_model_gpu_keep_loss's scratch */
    if (m->step_graph && !lb_adamw_params_same(&m->graph_ap, p)) {
        cudaGraphExecDestroy(m->step_graph);
        m->step_graph = NULL;
    }
    /* the first step runs directly: it prepares and times every product (host waits) */
    bool first = m->train_steps++ == 0;
    if (m->step_graph == NULL && !first && !m->graph_failed && !m->p.no_graph) capture(m, loss, p);
    if (m->step_graph)
        LB_CUDA_TRY(err, cudaGraphLaunch(m->step_graph, m->stream));
    else
        LB_TRY(lb_model_gpu_step(m, loss, p, err));
    return lb_model_gpu_keep_loss(m, slot, err);
}

bool lb_model_gpu_uses_graph(const lb_model_gpu *m) {
    return m->step_graph != NULL;
}

#endif
