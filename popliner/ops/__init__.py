"""Operations (programs attributed through debug contexts) and layers."""
