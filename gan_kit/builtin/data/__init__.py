"""Built-in data sets: digits, image folders and zip archives, torchvision sets."""
