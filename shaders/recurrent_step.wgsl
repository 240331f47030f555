// recurrent_step.wgsl — one generation step of the Mamba-1 mixer's recurrent core, O(1) per token.
//
// conv_step: the causal depthwise conv1d + SiLU for one new token, on a shift register of the
//   last d_conv inputs (K = d_conv):
//     conv_state[b, d, :] <- (conv_state[b, d, 1:], x[b, d])     (oldest input drops out)
//     x_conv[b, d] = silu(bias[d] + sum_k conv_state[b, d, k] * weight[d, 0, k])
//   This equals PyTorch's Conv1d(groups=D, padding=K-1) output at the newest position when
//   the state starts at zero. A shift (K-1 moves, K = 4 in Mamba) rather than a ring buffer,
//   so no write position has to change in a uniform every step.
// ssm_step: the selective scan's recurrence for one token, with delta = softplus(delta_raw)
//   (identity past 20) and A = -exp(A_log):
//     h[b, d, n] <- exp(delta A[d, n]) h[b, d, n] + delta x_c[b, d] B_t[b, n]
//     y[b, d] = sum_n C_t[b, n] h[b, d, n] + D[d] x_c[b, d]
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   conv_step:  0 conv_state  storage read_write  (B, D, K)
//               1 x_in        storage read        (B, D)
//               2 conv_weight storage read        (D, 1, K)   PyTorch Conv1d layout
//               3 conv_bias   storage read        (D)
//               4 x_conv      storage read_write  (B, D)
//   ssm_step:   5 h           storage read_write  (B, D, N)
//               6 x_c         storage read        (B, D)
//               7 delta_raw   storage read        (B, D)
//               8 a_log       storage read        (D, N)
//               9 b_t         storage read        (B, N)
//              10 c_t         storage read        (B, N)
//              11 d_skip      storage read        (D)
//              12 y           storage read_write  (B, D)
//   gather_rows: 14 rows_in  storage read        (S, R)  the states of all S slots
//                15 rows_out storage read_write  (B, R)  the rows of this step's slots
//                16 slot_of  storage read        (B,) u32
//   scatter_rows: 14 rows_in (B, R), 15 rows_out (S, R), 16 slot_of (B,) u32
//  13 params  uniform  Params (gather/scatter: batch = B rows, dim = R floats per row)
// Dispatch: one invocation per channel (b, d) for conv_step and ssm_step; grid_1d(B*D, WG), flat index
// (wid.y * nwg.x + wid.x) * WG + lid.x. The sum over n is one invocation's loop: deterministic.
//
// gather_rows / scatter_rows: batched decoding over state slots (model/gpu_decode.py). The
//   states of every slot live in one (S, R) buffer per layer; a step gathers the rows of its
//   active slots into a dense (B, R) buffer (rows_out[b, j] = rows_in[slot_of[b], j]), runs
//   conv_step/ssm_step on it and scatters it back (rows_out[slot_of[b], j] = rows_in[b, j]).
//   The slot list is a buffer written per step, so one recorded plan serves any B slots.
//   A copy, not an indirection inside ssm_step: that one already binds 8 storage buffers, the
//   WebGPU default maxStorageBuffersPerShaderStage. slot_of must not repeat a slot (the
//   scatter would race). One invocation per float: grid_1d(B*R, WG).
//
// Numerical hazards: exp(delta A) <= 1 (delta >= 0, A < 0), so h cannot overflow; softplus and
// sigmoid only exponentiate non-positive numbers; log1p is computed without losing tiny terms.

struct Params {
    batch: u32,
    dim: u32,
    d_state: u32,
    d_conv: u32,
}

@group(0) @binding(0) var<storage, read_write> conv_state: array<f32>;
@group(0) @binding(1) var<storage, read> x_in: array<f32>;
@group(0) @binding(2) var<storage, read> conv_weight: array<f32>;
@group(0) @binding(3) var<storage, read> conv_bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> x_conv: array<f32>;
@group(0) @binding(5) var<storage, read_write> h: array<f32>;
@group(0) @binding(6) var<storage, read> x_c: array<f32>;
@group(0) @binding(7) var<storage, read> delta_raw: array<f32>;
@group(0) @binding(8) var<storage, read> a_log: array<f32>;
@group(0) @binding(9) var<storage, read> b_t: array<f32>;
@group(0) @binding(10) var<storage, read> c_t: array<f32>;
@group(0) @binding(11) var<storage, read> d_skip: array<f32>;
@group(0) @binding(12) var<storage, read_write> y: array<f32>;
@group(0) @binding(13) var<uniform> params: Params;
@group(0) @binding(14) var<storage, read> rows_in: array<f32>;
@group(0) @binding(15) var<storage, read_write> rows_out: array<f32>;
@group(0) @binding(16) var<storage, read> slot_of: array<u32>;

override WG: u32 = 64;

const SOFTPLUS_THRESHOLD: f32 = 20.0;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

// log(1 + e) for 0 <= e <= 1 without losing small e (the rounding of u = 1 + e cancels).
fn log1p_small(e: f32) -> f32 {
    let u = 1.0 + e;
    if (u == 1.0) {
        return e;
    }
    return log(u) * (e / (u - 1.0));
}

fn softplus(v: f32) -> f32 {
    if (v > SOFTPLUS_THRESHOLD) {
        return v;
    }
    return max(v, 0.0) + log1p_small(exp(-abs(v)));
}

@compute @workgroup_size(WG)
fn conv_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // channel (b, d)
    if (i >= params.batch * params.dim) { return; }
    let d = i % params.dim;
    let taps = params.d_conv;
    let base = i * taps;
    var acc = conv_bias[d];
    for (var k = 0u; k + 1u < taps; k++) {
        let v = conv_state[base + k + 1u];
        conv_state[base + k] = v;
        acc += v * conv_weight[d * taps + k];
    }
    let newest = x_in[i];
    conv_state[base + taps - 1u] = newest;
    acc += newest * conv_weight[d * taps + taps - 1u];
    x_conv[i] = acc * sigmoid(acc);
}

@compute @workgroup_size(WG)
fn ssm_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // channel (b, d)
    if (i >= params.batch * params.dim) { return; }
    let b = i / params.dim;
    let d = i % params.dim;
    let n_state = params.d_state;
    let xt = x_c[i];
    let dt = softplus(delta_raw[i]);
    let dtx = dt * xt;
    var acc = 0.0;
    for (var n = 0u; n < n_state; n++) {
        let a = -exp(a_log[d * n_state + n]);
        let hn = exp(dt * a) * h[i * n_state + n] + dtx * b_t[b * n_state + n];
        h[i * n_state + n] = hn;
        acc += hn * c_t[b * n_state + n];
    }
    y[i] = acc + d_skip[d] * xt;
}

@compute @workgroup_size(WG)
fn gather_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // float (b, j) of the dense rows
    if (i >= params.batch * params.dim) { return; }
    let b = i / params.dim;
    let j = i % params.dim;
    rows_out[i] = rows_in[slot_of[b] * params.dim + j];
}

@compute @workgroup_size(WG)
fn scatter_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // float (b, j) of the dense rows
    if (i >= params.batch * params.dim) { return; }
    let b = i / params.dim;
    let j = i % params.dim;
    rows_out[slot_of[b] * params.dim + j] = rows_in[i];
}
