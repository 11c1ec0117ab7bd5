"""A DataLoader over JPEG files with RandomResizedCrop, ToTensor and Normalize in its workers,
for `mlprof-collect --torch --sample` (tests/tests/hotspots.rs): each transform runs inside
its `transform:<Class>` span, so `mlprof hotspots` can say which native code each one spends
its CPU in (PIL's resampling for the crop, libtorch for Normalize).

    hot_dataloader.py DIR IMAGES EPOCHS fork|spawn
"""

import os
import sys


def make_images(folder, count):
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        path = os.path.join(folder, f"{i:03d}.jpg")
        if not os.path.exists(path):
            # Smooth gradients with some texture: a real photo's size, a quick encode.
            image = Image.linear_gradient("L").resize((640, 480)).convert("RGB")
            image = Image.merge(
                "RGB", [image.getchannel(0), image.getchannel(1).rotate(i), image.getchannel(2)]
            )
            image.save(path, quality=90)


class Images:
    def __init__(self, folder, transform):
        self.paths = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        from PIL import Image

        with open(self.paths[index], "rb") as f:
            # Decoded here, as torchvision's loader does, not inside the first transform.
            image = Image.open(f).convert("RGB")
        return self.transform(image)


def main():
    folder, count, epochs, context = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    make_images(folder, count)
    import torch
    from torchvision import transforms

    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(512, scale=(0.5, 1.0)),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    loader = torch.utils.data.DataLoader(
        Images(folder, transform), batch_size=8, num_workers=2, multiprocessing_context=context
    )
    import time

    total = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            total += batch.shape[0]
    print(f"samples={total}")
    print(f"loop_s={time.perf_counter() - started:.4f}")


if __name__ == "__main__":
    main()
