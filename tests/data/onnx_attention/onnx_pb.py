import struct, os, sys, json
def varint(b, i):
    r = 0; s = 0
    while True:
        c = b[i]; i += 1
        r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def fields(b):
    i = 0; out = []
    while i < len(b):
        key, i = varint(b, i); f, wt = key >> 3, key & 7
        if wt == 0: v, i = varint(b, i)
        elif wt == 1: v = b[i:i+8]; i += 8
        elif wt == 5: v = b[i:i+4]; i += 4
        elif wt == 2:
            l, i = varint(b, i); v = b[i:i+l]; i += l
        else: raise ValueError(wt)
        out.append((f, wt, v))
    return out
def signed(v): return v - (1 << 64) if v >= 1 << 63 else v
def half(u):
    s = (u >> 15) & 1; e = (u >> 10) & 31; m = u & 1023
    if e == 0: v = m / 1024 * 2 ** -14
    elif e == 31: v = float('inf') if m == 0 else float('nan')
    else: v = (1 + m / 1024) * 2 ** (e - 15)
    return -v if s else v
def tensor(b):
    dims = []; dt = None; name = ''; raw = None; fl = []; i64 = []; i32 = []; dbl = []
    for f, wt, v in fields(b):
        if f == 1:
            if wt == 2:
                j = 0
                while j < len(v): x, j = varint(v, j); dims.append(signed(x))
            else: dims.append(signed(v))
        elif f == 2: dt = v
        elif f == 4:
            if wt == 2: fl += list(struct.unpack('<%df' % (len(v)//4), v))
            else: fl.append(struct.unpack('<f', v)[0])
        elif f == 5:
            if wt == 2:
                j = 0
                while j < len(v): x, j = varint(v, j); i32.append(x)
            else: i32.append(v)
        elif f == 8: name = v.decode()
        elif f == 9: raw = v
        elif f == 10:
            if wt == 2: dbl += list(struct.unpack('<%dd' % (len(v)//8), v))
    if raw is not None:
        if dt == 1: vals = list(struct.unpack('<%df' % (len(raw)//4), raw))
        elif dt == 11: vals = list(struct.unpack('<%dd' % (len(raw)//8), raw))
        elif dt == 9: vals = [float(x) for x in raw]
        elif dt == 10: vals = [half(x) for x in struct.unpack('<%dH' % (len(raw)//2), raw)]
        elif dt == 7: vals = list(struct.unpack('<%dq' % (len(raw)//8), raw))
        else: raise ValueError(dt)
    else:
        vals = fl or dbl or [float(x) for x in i32]
        if dt == 10: vals = [half(x) for x in i32]
    return {'name': name, 'dtype': dt, 'shape': dims, 'data': vals}
def attribute(b):
    a = {}
    for f, wt, v in fields(b):
        if f == 1: a['name'] = v.decode()
        elif f == 2: a['f'] = struct.unpack('<f', v)[0]
        elif f == 3: a['i'] = signed(v)
        elif f == 20: a['type'] = v
    return a
def model(path):
    b = open(path, 'rb').read()
    g = [v for f, wt, v in fields(b) if f == 7][0]
    nodes = []; inputs = []; outputs = []
    for f, wt, v in fields(g):
        if f == 1:
            n = {'inputs': [], 'outputs': [], 'attrs': {}}
            for ff, ww, vv in fields(v):
                if ff == 1: n['inputs'].append(vv.decode())
                elif ff == 2: n['outputs'].append(vv.decode())
                elif ff == 4: n['op'] = vv.decode()
                elif ff == 5:
                    a = attribute(vv); n['attrs'][a['name']] = a.get('f', a.get('i'))
            nodes.append(n)
        elif f == 11: inputs.append([vv.decode() for ff, ww, vv in fields(v) if ff == 1][0])
        elif f == 12: outputs.append([vv.decode() for ff, ww, vv in fields(v) if ff == 1][0])
    return nodes, inputs, outputs
def case(d):
    nodes, ins, outs = model(os.path.join(d, 'model.onnx'))
    ds = os.path.join(d, 'test_data_set_0')
    inp = [tensor(open(os.path.join(ds, 'input_%d.pb' % k), 'rb').read()) for k in range(len(ins))]
    out = [tensor(open(os.path.join(ds, 'output_%d.pb' % k), 'rb').read()) for k in range(len(outs))]
    return nodes, ins, outs, inp, out
if __name__ == '__main__':
    root = '/work/shared/onnx-node-tests'
    for name in sorted(os.listdir(root)):
        if not name.startswith('test_attention'): continue
        nodes, ins, outs, inp, out = case(os.path.join(root, name))
        n = nodes[0]
        print(name, n['op'], n['inputs'], n['outputs'], n['attrs'], [(t['shape'], t['dtype']) for t in inp], [t['shape'] for t in out])
