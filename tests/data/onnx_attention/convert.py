# Converts ONNX v1.22 Attention node tests (model.onnx + test_data_set_0/*.pb) to the JSON files
# next to it, with no onnx/numpy/protobuf package: a minimal protobuf reader (onnx_pb.py).
# Usage: python3 convert.py /path/to/onnx-node-tests   (run by hand; tests read only the JSON)
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_pb import case
root = '/work/shared/onnx-node-tests'
out_dir = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else root
cases = ['test_attention_3d_gqa_causal', 'test_attention_3d_diff_heads_sizes_attn_mask',
         'test_attention_3d_with_past_and_present_qk_matmul_softcap', 'test_attention_3d_diff_heads_with_past_and_present',
         'test_attention_3d_gqa_softcap', 'test_attention_3d_scaled',
         'test_attention_4d_attn_mask_4d_causal', 'test_attention_4d_attn_mask_bool', 'test_attention_4d_gqa_with_past_and_present',
         'test_attention_4d_scaled', 'test_attention_4d_softcap_neginf_mask', 'test_attention_4d_with_past_and_present_qk_matmul',
         'test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal', 'test_attention_4d_with_qk_matmul_softmax',
         'test_attention_4d_diff_heads_sizes_softcap', 'test_attention_4d_gqa_attn_mask', 'test_attention_4d_causal',
         'test_attention_4d_diff_heads_with_past_and_present_mask3d']
slots_in = ['Q', 'K', 'V', 'attn_mask', 'past_key', 'past_value']
slots_out = ['Y', 'present_key', 'present_value', 'qk_matmul_output']
def num(x):
    if x != x: return "NaN"
    if x == float('inf'): return "Infinity"
    if x == float('-inf'): return "-Infinity"
    return float('%.9g' % x)
for name in cases:
    nodes, ins, outs, inp, out = case(os.path.join(root, name))
    n = nodes[0]
    doc = {'source': 'ONNX v1.22 node test ' + name + ' (model.onnx, test_data_set_0), converted to JSON',
           'attrs': n['attrs'], 'inputs': {}, 'outputs': {}}
    graph_in = dict(zip(ins, inp)); graph_out = dict(zip(outs, out))
    for slot, vname in enumerate(n['inputs']):
        if not vname: continue
        t = graph_in[vname]
        doc['inputs'][slots_in[slot]] = {'shape': t['shape'], 'boolean': t['dtype'] == 9, 'data': [num(x) for x in t['data']]}
    for slot, vname in enumerate(n['outputs']):
        if not vname: continue
        t = graph_out[vname]
        doc['outputs'][slots_out[slot]] = {'shape': t['shape'], 'data': [num(x) for x in t['data']]}
    json.dump(doc, open(os.path.join(out_dir, name[len('test_'):] + '.json'), 'w'), separators=(',', ':'))
