/* model_gpu_graph.c: a training step of the GPU transformer as one CUDA graph
 * (lb_model_gpu_train_step, model/model_gpu.h).
 *
 * The first step runs kernel by kernel: it prepares and times every product and makes the
 * timed choices (model_gpu_tune.c), all of which wait on the device. The second step is
 * captured as a graph (gradient clears, forward, backward, optimizer; the batch upload and
 * the copy of the mean loss into its slot stay outside) and every later step launches it,
 * recaptured when the optimizer settings change. Before instantiation the libraries' small
 * workspace memsets become kernel nodes (gpu/graph.cuh). A capture the driver refuses is
 * not an error: that step and all later ones run kernel by kernel, with the same results. */
#ifdef LB_HAVE_CUDA

#include "core/log.h"
#include "gpu/check.h"
#include "gpu/graph.cuh"
#include "model/model_gpu_impl.h"

static bool same_adamw(const lb_gpu_adamw_params *a, const lb_gpu_adamw_params *b) {
    return a->lr == b->lr && a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps &&
           a->weight_decay == b->weight_decay && a->grad_clip == b->grad_clip &&
           a->dynamic_scaling == b->dynamic_scaling && a->growth_interval == b->growth_interval;
}

/* Memset nodes up to this size become kernel nodes in the step graph: cuBLASLt's and
 * cuDNN's (4 to 1,536 bytes) and the bias-gradient clears (9-12 KB); not the large clears. */
#define GRAPH_FILL_MAX_BYTES 65536

/* Records a whole step (lb_model_gpu_step) into step_graph. A step that cannot be captured (an
 * operation that stream capture does not allow) is not an error: nothing of it ran, the caller runs
 * it kernel by kernel, and so do all later steps. */
static void capture(lb_model_gpu *m, float *loss, const lb_gpu_adamw_params *p) {
    lb_err e;
    cudaGraph_t g = NULL;
    const char *why = NULL;
    if (cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        why = "stream capture could not begin";
    } else {
        lb_status st = lb_model_gpu_step(m, loss, p, &e);
        cudaError_t ce = cudaStreamEndCapture(m->stream, &g);
        if (st != LB_OK)
            why = e.msg;
        else if (ce != cudaSuccess)
            why = cudaGetErrorString(ce);
        else {
            /* the libraries' small workspace memsets as kernel nodes (gpu/graph.cuh); a
             * failure leaves a valid graph, with the rest of them as memsets */
            int replaced = 0;
            if (lb_gpu_graph_memsets_to_kernels(g, GRAPH_FILL_MAX_BYTES, &replaced, &e) != LB_OK)
                LB_DEBUG("step graph: %s", e.msg);
            LB_DEBUG("step graph: %d memset nodes of at most %d bytes replaced by kernel nodes",
                     replaced, GRAPH_FILL_MAX_BYTES);
            if (cudaGraphInstantiate(&m->step_graph, g, 0) != cudaSuccess)
                why = "the graph could not be instantiated";
        }
    }
    if (g) cudaGraphDestroy(g);
    if (why == NULL) {
        m->graph_ap = *p;
        return;
    }
    cudaGetLastError();
    m->step_graph = NULL;
    m->graph_failed = true;
    LB_INFO("training steps run kernel by kernel: capturing one as a CUDA graph failed (%s)", why);
}

lb_status lb_model_gpu_train_step(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                                  int slot, const lb_gpu_adamw_params *p, lb_err *err) {
    LB_TRY(lb_model_gpu_upload(m, inputs, targets, slot, err));
    float *loss = m->loss_slots + n_slots(m);
    if (m->step_graph && !same_adamw(&m->graph_ap, p)) {
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
    LB_CUDA_TRY(err, cudaMemcpyAsync(m->loss_slots + slot, loss, sizeof *loss,
                                     cudaMemcpyDeviceToDevice, m->stream));
    return LB_OK;
}

bool lb_model_gpu_uses_graph(const lb_model_gpu *m) {
    return m->step_graph != NULL;
}

#endif
