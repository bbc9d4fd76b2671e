/* train_cuda.h: the CUDA path of the training workload (implemented under src/gpu and
 * src/train when built with CUDA).
 *
 * lb_train_cuda_run() trains on device p->device_index with batches from `data`, starting
 * from the weights of hf (NULL: random weights from p->seed), filling
 * r's series warmup_step_ms, warmup_loss, step_ms and loss exactly like the CPU path, and
 * adding the device metrics (peak device bytes, MFU, GPU utilisation, energy per token,
 * skipped fp16 steps). lb_train_summarize() is called by the caller afterwards. */
#ifndef LB_TRAIN_TRAIN_CUDA_H
#define LB_TRAIN_TRAIN_CUDA_H

#include "core/result.h"
#include "model/config.h"
#include "model/hf_model.h"
#include "train/data.h"
#include "train/train.h"

lb_status lb_train_cuda_run(const lb_train_params *p, const lb_model_config *cfg,
                            const lb_hf_model *hf, lb_data_loader *data, lb_result *r, lb_err *err);

/* Before anything is allocated: whether a rank's device bytes by the memory formula at p's
 * stage and rank count (train/memory.h) fit the free memory of GPU p->device_index
 * (lb_train_check_fit's sentence when not), adapters on a frozen base included. LB_OK in a
 * build without CUDA. */
lb_status lb_train_cuda_check_fit(const lb_train_params *p, const lb_model_config *cfg,
                                  lb_err *err);

#endif
