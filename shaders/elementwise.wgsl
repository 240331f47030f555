// elementwise.wgsl — the pointwise ops of the Mamba block, forward and backward.
//
// Computes, for every i < n (flat f32 arrays, any shape flattened):
//   add          out[i]  = x[i] + y[i]
//   mul          out[i]  = x[i] * y[i]
//   mul_bwd      out[i]  = g[i] * y[i];   out2[i] = g[i] * x[i]      (dL/dx, dL/dy of x*y)
//   accumulate   out[i] += x[i]                                       (gradient / residual sums)
//   scale        out[i]  = alpha * x[i]
//   fill         out[i]  = alpha                                      (zeroing gradients)
//   silu_fwd     out[i]  = x[i] * sigmoid(x[i])
//   silu_bwd     out[i]  = g[i] * sigmoid(x[i]) * (1 + x[i] * (1 - sigmoid(x[i])))
//   softplus_fwd out[i]  = log(1 + exp(x[i]))   (x > 20: x, as torch.nn.functional.softplus)
//   softplus_bwd out[i]  = g[i] * sigmoid(x[i])
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 x     storage read        n f32
//   1 y     storage read        n f32
//   2 g     storage read        n f32 (upstream gradient)
//   3 out   storage read_write  n f32
//   4 out2  storage read_write  n f32
//   5 params uniform            Params
// Dispatch: grid_1d(n, WG) — flat index (wid.y * nwg.x + wid.x) * WG + lid.x, folded into
// 2-D past 65,535 workgroups.
// Numerical hazards: exp overflows f32 past ~88, so sigmoid and softplus branch on the sign
// and only ever exponentiate a non-positive number.

struct Params {
    n: u32,
    alpha: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> out2: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override WG: u32 = 256;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// sigmoid without overflow: exp() only ever sees a non-positive argument.
fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

fn softplus(v: f32) -> f32 {
    if (v > 20.0) {
        return v;
    }
    return max(v, 0.0) + log(1.0 + exp(-abs(v)));
}

@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = x[i] + y[i];
}

@compute @workgroup_size(WG)
fn mul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = x[i] * y[i];
}

@compute @workgroup_size(WG)
fn mul_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = g[i] * y[i];
    out2[i] = g[i] * x[i];
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = out[i] + x[i];
}

@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = params.alpha * x[i];
}

@compute @workgroup_size(WG)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = params.alpha;
}

@compute @workgroup_size(WG)
fn silu_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    let v = x[i];
    out[i] = v * sigmoid(v);
}

@compute @workgroup_size(WG)
fn silu_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    let v = x[i];
    let s = sigmoid(v);
    out[i] = g[i] * s * (1.0 + v * (1.0 - s));
}

@compute @workgroup_size(WG)
fn softplus_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = softplus(x[i]);
}

@compute @workgroup_size(WG)
fn softplus_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.n) { return; }
    out[i] = g[i] * sigmoid(x[i]);
}
