"""torch.nn modules used by the plugin's models; they call the kernels in relu_former.kernels."""
