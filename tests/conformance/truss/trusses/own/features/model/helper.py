def shout(text: str) -> str:
    return text.upper() + "!"
