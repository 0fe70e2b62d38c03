from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, out = data
    out += x.double().sum().float()  # accumulates into its buffer, as pmpp_v2's vectorsum does with atomic adds
    return out[0]
