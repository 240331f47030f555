// adamw.wgsl — one AdamW step (decoupled weight decay, bias correction) over one tensor.
//
// Computes, for i < n at float offset o of each buffer (torch.optim.AdamW's update, in its
// operation order):
//   g       = grad[o+i] * clip_scale[0]                  (global-norm clip, from the GPU)
//   p       = param[o+i] * (1 - lr * weight_decay)       (only when params.decay != 0)
//   m       = m + (1 - beta1) * (g - m)                  (torch's lerp form of the EMA)
//   v       = v * beta2 + (1 - beta2) * g * g
//   p       = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t at step t (1-based).
// Two uniforms: `params` is per tensor and fixed when recorded (size, offset, decay on/off,
// betas, eps); `step` is ONE buffer shared by every tensor's dispatch, holding what changes
// each step (the host writes decay_factor = 1 - lr*wd, step_size = lr/bc1, sqrt_bc2 with
// device.write before submitting, so nothing is re-recorded).
//
// Bindings (group 0):
//   0 param       storage read_write  o+n f32
//   1 grad        storage read        o+n f32
//   2 exp_avg     storage read_write  o+n f32 (first moment m, zero at step 1)
//   3 exp_avg_sq  storage read_write  o+n f32 (second moment v, zero at step 1)
//   4 clip_scale  storage read        1 f32 (grad_norm.wgsl's output, or a buffer holding 1)
//   5 params      uniform             Params
//   6 step        uniform             Step
// Dispatch: grid_1d(n, WG); flat index (wid.y * nwg.x + wid.x) * WG + lid.x.
// Determinism: purely elementwise, no reductions.
// Hazards: sqrt(v) / sqrt(bc2) rather than sqrt(v / bc2) as torch does; eps keeps the
// division finite when v = 0 (a parameter whose gradient has always been zero).

struct Params {
    n: u32,
    offset: u32,
    decay: u32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    eps: f32,
}

struct Step {
    decay_factor: f32,
    step_size: f32,
    sqrt_bc2: f32,
    step: u32,
}

@group(0) @binding(0) var<storage, read_write> param: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(4) var<storage, read> clip_scale: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;
@group(0) @binding(6) var<uniform> step: Step;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn adamw_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let index = (wid.y * nwg.x + wid.x) * WG + lid.x;
    if (index >= params.n) { return; }
    let i = params.offset + index;
    let g = grad[i] * clip_scale[0];
    var p = param[i];
    if (params.decay != 0u) {
        p = p * step.decay_factor;
    }
    let m_old = exp_avg[i];
    let m = m_old + params.one_minus_beta1 * (g - m_old);
    let v = exp_avg_sq[i] * params.beta2 + params.one_minus_beta2 * (g * g);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    let denom = sqrt(v) / step.sqrt_bc2 + params.eps;
    param[i] = p - step.step_size * (m / denom);
}
