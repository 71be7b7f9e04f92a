def test_up_refuses_an_image_whose_cuda_the_host_driver_cannot_run() -> None:
    from launcher.bootstrap.steps import driver_refusal

    refused = driver_refusal("team/train:abc", "2.14.1+cu130", "535.104.05")
    assert refused is not None
    assert "cu130" in refused.message and "535.104.05" in refused.message
    assert driver_refusal("team/train:abc", "2.14.1+cu130", "580.159.04") is None
    assert driver_refusal("team/train:abc", "2.13.0+cpu", "535.104.05") is None
    assert driver_refusal("pytorch/pytorch:latest", "", "535.104.05") is None
