// grad_norm.wgsl — global gradient L2 norm over many tensors, and the clip-by-norm factor.
//
// Computes, for gradient tensors g_0 .. g_{T-1} (each n_t f32, at float offset o_t of its
// buffer):
//   sumsq_partial  one dispatch per tensor, G_t workgroups:
//                  partial[slot_t + w] = sum of g_t[i]^2 over i = w*WG + lane + k*G_t*WG
//                  (each lane loops k ascending; lanes then combine as a fixed binary tree)
//   norm_finish    one workgroup: total = sum over all S = sum_t G_t slots of partial
//                  (lane s sums slots s, s+WG, ... ascending; then a fixed binary tree)
//                  norm[0] = sqrt(total)
//                  clip_scale[0] = min(1, max_norm / (norm + 1e-6))   (torch clip_grad_norm_)
// AdamW reads clip_scale[0] from the GPU, so a training step needs no host readback; the
// gradients themselves are not rescaled (AdamW multiplies as it reads them).
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 grad        storage read        o_t + n_t f32 (one tensor per sumsq_partial dispatch)
//   1 partial     storage read_write  S f32 scratch
//   2 norm        storage read_write  1 f32
//   3 clip_scale  storage read_write  1 f32
//   4 params      uniform             Params
// Dispatch: sumsq_partial (G_t, 1, 1) with G_t = min(ceil(n_t / WG), max_groups) <= 65535,
// fixed when recorded; norm_finish (1, 1, 1).
// Determinism: the slot layout, each lane's loop order and the trees are fixed when the
// dispatches are recorded, so the same gradients give the same bits every step.
// Hazards: a gradient element past ~1.8e19 squares to inf in f32; an inf or NaN gradient
// makes the norm non-finite. Then clip_scale is 0 (the step keeps only weight decay and the
// moments' decay) and norm[0] holds the inf/NaN for the caller to notice and log. NaN is
// detected from the bit pattern: compilers may fold `x != x` away.

struct Params {
    n: u32,
    offset: u32,
    slot: u32,
    slots: u32,
    max_norm: f32,
}

@group(0) @binding(0) var<storage, read> grad: array<f32>;
@group(0) @binding(1) var<storage, read_write> partial: array<f32>;
@group(0) @binding(2) var<storage, read_write> norm: array<f32>;
@group(0) @binding(3) var<storage, read_write> clip_scale: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

// Invocations per workgroup; a power of two <= 256 (the size of the reduction scratch).
override WG: u32 = 64;

var<workgroup> scratch: array<f32, 256>;

// Sum over the workgroup's lanes as a fixed binary tree; lane 0's result is the total.
fn workgroup_sum(value: f32, lane: u32) -> f32 {
    scratch[lane] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            scratch[lane] = scratch[lane] + scratch[lane + stride];
        }
        workgroupBarrier();
    }
    return scratch[0];
}

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(WG)
fn sumsq_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    // No early return: every lane must reach the barriers; out-of-range lanes add nothing.
    let step = nwg.x * WG;
    var acc = 0.0;
    for (var i = wid.x * WG + lid.x; i < params.n; i += step) {
        let g = grad[params.offset + i];
        acc += g * g;
    }
    let total = workgroup_sum(acc, lid.x);
    if (lid.x == 0u) {
        partial[params.slot + wid.x] = total;
    }
}

@compute @workgroup_size(WG)
fn norm_finish(@builtin(local_invocation_id) lid: vec3<u32>) {
    var acc = 0.0;
    for (var s = lid.x; s < params.slots; s += WG) {
        acc += partial[s];
    }
    let total = workgroup_sum(acc, lid.x);
    if (lid.x == 0u) {
        let value = sqrt(total);
        norm[0] = value;
        var scale = 0.0;
        if (is_finite(value)) {
            scale = min(1.0, params.max_norm / (value + 1e-6));
        }
        clip_scale[0] = scale;
    }
}
